# lib.sh: shell functions bench.sh and callgrind.sh share; sourced, not run.

# free_port prints a loopback TCP port nothing listens on, for a server
# the script starts itself.
free_port() {
  local p
  for p in $(shuf -i 20000-40000 -n 50); do
    ss -ltn | awk '{print $4}' | grep -q ":$p\$" || { echo "$p"; return; }
  done
  return 1
}
