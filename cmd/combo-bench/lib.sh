# lib.sh: shell functions bench.sh and callgrind.sh share; sourced, not run.

# free_ports N prints N distinct loopback TCP ports no socket uses, for
# servers the script starts itself. They are drawn below the kernel's
# ephemeral range (ip_local_port_range; 32768 up on Linux by default),
# where outgoing connections take their local ports: a port such a
# connection holds is not listening, so a check of listeners alone passed
# it, and the server started on it failed to bind ("Address already in
# use"). Every TCP socket's local port is checked, not only listeners'.
# The ports are not reserved: a script starts its servers on them at once.
free_ports() {
  local want=$1 low=32768 top p used got=()
  [ -r /proc/sys/net/ipv4/ip_local_port_range ] && read -r low _ </proc/sys/net/ipv4/ip_local_port_range
  top=$((low - 1))
  [ "$top" -gt 20100 ] || top=40000 # an unusual range: take the old draw
  # Its header skipped by awk, not -H, which ss lacks before iproute2 4.12.
  used=$(ss -tan | awk 'NR > 1 {n = split($4, a, ":"); print a[n]}')
  for p in $(shuf -i "20000-$top" -n 200); do
    grep -qx "$p" <<<"$used" && continue
    printf '%s\n' "${got[@]}" | grep -qx "$p" && continue
    got+=("$p")
    [ "${#got[@]}" -eq "$want" ] && { echo "${got[@]}"; return; }
  done
  return 1
}

# free_port prints one such port.
free_port() { free_ports 1; }

# alive PID succeeds while the process runs. kill -0 is not enough for a
# child of the script: one that exited stays a zombie until waited for,
# and kill -0 succeeds on it. Its state is read from /proc (the field after
# the command's closing parenthesis), so that no ps is needed (a slim
# container has none: alive then said a starting server had exited);
# ps where there is no /proc.
alive() {
  local s
  if [ -d /proc/self ]; then
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    [[ $s != [ZX]* ]]
  else
    s=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $s != Z* ]]
  fi
}
