package repo

// PendingCalls is how many Report calls wait for a shared pipeline, over
// all shards.
func PendingCalls(r *Repo) int {
	n := 0
	for _, c := range r.reports {
		c.mu.Lock()
		n += len(c.pending)
		c.mu.Unlock()
	}
	return n
}

// WriteProbeLua is the readiness probe's script, whose ACL checks must
// name every command the service runs.
const WriteProbeLua = writeProbeLua

// AloneSlots is how many calls may run pipelines of their own at once on
// the node of each shard.
func AloneSlots(r *Repo) []int {
	t := r.slots.Load()
	out := make([]int, len(t.shardNode))
	for shard, n := range t.shardNode {
		out[shard] = t.nodes[n].n
	}
	return out
}
