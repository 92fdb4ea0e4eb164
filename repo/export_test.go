package repo

// PendingCalls is how many Report calls wait for a shared pipeline.
func PendingCalls(r *Repo) int {
	r.reports.mu.Lock()
	defer r.reports.mu.Unlock()
	return len(r.reports.pending)
}
