package repo

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"
)

// NotAppendOnly returns the addresses, sorted, of the nodes that keep no
// append-only file, of those Evicting asks. Restarted, such a node
// comes back from its last RDB snapshot or empty: the consumer group comes
// back as it was at the snapshot, so a window pushed since is pushed again
// and a window acknowledged since is lost, found only as "gone", with
// nothing counting it (combo_stream_groups_recreated_total counts a group
// that vanished, not one that went back in time). README requires AOF for
// that reason. It reads INFO persistence, and like Evicting it returns the
// nodes that answered with an error naming each that did not.
func (r *Repo) NotAppendOnly(ctx context.Context) ([]string, error) {
	read, err := r.eachNode(ctx, "repo.NotAppendOnly", AOFEnabled)
	return AppendOnlyOff(read), err
}

// AppendOnly returns the aof_enabled of every node NotAppendOnly asks
// that answered (address -> "0" or "1"), and an error naming each that
// did not: a node missing from the map was not read, unlike one read as
// "0".
func (r *Repo) AppendOnly(ctx context.Context) (map[string]string, error) {
	return r.eachNode(ctx, "repo.AppendOnly", AOFEnabled)
}

// AppendOnlyOff returns, sorted, the nodes of enabled (address ->
// aof_enabled, as AOFEnabled reads it) that keep no append-only file.
func AppendOnlyOff(enabled map[string]string) []string {
	var nodes []string
	for _, node := range slices.Sorted(maps.Keys(enabled)) {
		if enabled[node] == "0" {
			nodes = append(nodes, node)
		}
	}
	return nodes
}

// AOFEnabled reads c's node's aof_enabled ("0" or "1") from INFO
// persistence.
func AOFEnabled(ctx context.Context, c *redis.Client) (string, error) {
	v, err := infoField(ctx, c, "Persistence", "aof_enabled")
	if err != nil {
		return "", fmt.Errorf("repo.AOFEnabled: %w", err)
	}
	return v, nil
}
