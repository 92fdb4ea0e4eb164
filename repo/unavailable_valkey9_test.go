package repo

import "testing"

// valkeyReply is an error reply as go-redis gives one.
type valkeyReply string

func (e valkeyReply) Error() string { return string(e) }
func (valkeyReply) RedisError()     {}

// Valkey 9 runs Lua as a module, so a script's command refused by the
// Cluster gets the module API's words, not "Script attempted to ...":
// they too say nothing ran and the report may be sent again, not that the
// script failed on its own (degraded, then INTERNAL).
func TestValkey9ScriptRefusalsAreUnavailable(t *testing.T) {
	for _, msg := range []string{
		"ERR Can not execute a write command 'sadd' while the cluster is down and readonly",
		"ERR Can not execute a command 'xadd' while the cluster is down",
		"ERR Attempted to access a non local key in a cluster node",
		// Redis's own, still matched.
		"ERR Script attempted to execute a write command while the cluster is down and readonly script: 1a2b, on @user_script:3.",
	} {
		if !isUnavailable(valkeyReply(msg)) {
			t.Errorf("isUnavailable(%q) = false, want true", msg)
		}
	}
	for _, msg := range []string{"ERR user_script:1: boom", "WRONGTYPE Operation against a key holding the wrong kind of value"} {
		if isUnavailable(valkeyReply(msg)) {
			t.Errorf("isUnavailable(%q) = true, want false", msg)
		}
	}
}
