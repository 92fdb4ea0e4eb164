package repo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// eachNode runs read on every node the start checks ask (one Redis, the
// master found by Sentinel, or every node of a Cluster, replicas too: a
// failover makes one the master, with its own configuration) and returns
// what each that answered gave (address -> value), and an error, named by
// op, naming each that did not: one node down must not hide the others.
// A Cluster node marked failed is named too, as not asked (failedUnasked).
func (r *Repo) eachNode(ctx context.Context, op string,
	read func(context.Context, *redis.Client) (string, error)) (map[string]string, error) {
	var mu sync.Mutex // ForEachShard asks the nodes at once
	out := map[string]string{}
	asked := map[string]bool{}
	var errs []error // of every node, where ForEachShard returns one
	ask := func(ctx context.Context, c *redis.Client) error {
		value, err := read(ctx, c)
		node := c.Options().Addr
		if node == failoverClientAddr {
			node = "the master found by Sentinel"
		}
		mu.Lock()
		defer mu.Unlock()
		asked[node] = true
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", node, err))
		} else {
			out[node] = value
		}
		return nil
	}
	var failed []error // FailedNode: beside op's error, not in it, which would call them unavailable
	switch c := r.rdb.(type) {
	case *redis.ClusterClient:
		// An error here is the cluster's state, before any node was asked.
		if err := c.ForEachShard(ctx, ask); err != nil {
			errs = append(errs, err)
		}
		for _, err := range failedUnasked(ctx, c, asked) {
			if _, ok := err.(FailedNode); ok {
				failed = append(failed, err)
			} else {
				errs = append(errs, err)
			}
		}
	case *redis.Client:
		_ = ask(ctx, c)
	default:
		return nil, fmt.Errorf("%s: a %T cannot be asked node by node", op, r.rdb)
	}
	if len(failed) == 0 {
		return out, wrap(op, errors.Join(errs...))
	}
	return out, errors.Join(append([]error{wrap(op, errors.Join(errs...))}, failed...)...)
}

// FailedNode is a Cluster node marked failed, which eachNode did not ask:
// it is in no slot map, so ForEachShard does not ask it. Left out, it
// would look removed: the node watches forget a node no longer among
// those read, and a node without AOF or evicting that crashed (the moment
// its setting costs windows) was forgotten, its gauge and alert cleared.
// Named so, it keeps what it was last read as, and only it: a failed node
// left in CLUSTER NODES for good (Redis never drops one by itself) does
// not keep others that were removed.
type FailedNode struct {
	Addr, ID, Flags string
	// HostAddr is its address by the hostname it announces (host:port),
	// as go-redis names the nodes it asks under
	// cluster-preferred-endpoint-type hostname; "" if it announces none.
	HostAddr string
}

func (e FailedNode) Error() string {
	// By its hostname first, where it announces one: every other line
	// (go-redis's, the start checks', the watches') calls it so.
	name := e.Addr
	if e.HostAddr != "" {
		name = e.HostAddr + " (" + e.Addr + ")"
	}
	return fmt.Sprintf("%s: not asked, marked failed by the Cluster (flags %s; once it is gone for good, "+
		"CLUSTER FORGET %s on every node)", name, e.Flags, e.ID)
}

// failedUnasked names each node the Cluster marks failed that asked
// (node -> true) does not hold, as a FailedNode. A node only suspected
// (fail?) is still in the slot map and asked. If CLUSTER NODES cannot be
// read, that is the error: which nodes went unasked is not known.
func failedUnasked(ctx context.Context, c *redis.ClusterClient, asked map[string]bool) []error {
	nodes, err := c.ClusterNodes(ctx).Result()
	switch {
	case redis.IsPermissionError(err):
		return []error{fmt.Errorf("CLUSTER NODES, which tells a failed node from one removed (README's ACL user "+
			"has +cluster|nodes): %w", err)}
	case redis.IsAuthError(err):
		// Not wrapped: the node that refused it is named refusing already
		// (ForEachShard asked it too), and counted once, not twice.
		return []error{fmt.Errorf("CLUSTER NODES: %v", err)}
	case err != nil:
		return []error{fmt.Errorf("CLUSTER NODES: %w", err)}
	}
	var errs []error
	for line := range strings.SplitSeq(nodes, "\n") {
		failed, ok := failedNodeOf(line)
		if ok && !asked[failed.Addr] && (failed.HostAddr == "" || !asked[failed.HostAddr]) {
			errs = append(errs, failed)
		}
	}
	return errs
}

// failedNodeOf reads one line of CLUSTER NODES (id, ip:port@cport with
// ",hostname" when one is announced, flags, ...) and says whether it is a
// node flagged fail. Its addresses are written as go-redis writes those
// of the nodes it asks (net.JoinHostPort of CLUSTER SLOTS's ip, or
// hostname, and port): Redis writes an IPv6 address unbracketed
// ("::1:6379"), go-redis "[::1]:6379".
func failedNodeOf(line string) (FailedNode, bool) {
	f := strings.Fields(line)
	if len(f) < 3 || !slices.Contains(strings.Split(f[2], ","), "fail") {
		return FailedNode{}, false
	}
	addr, ports, _ := strings.Cut(f[1], "@")
	failed := FailedNode{Addr: addr, ID: f[0], Flags: f[2]}
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return failed, true
	}
	ip, port := addr[:i], addr[i+1:]
	failed.Addr = net.JoinHostPort(ip, port)
	if _, extra, ok := strings.Cut(ports, ","); ok {
		if host, _, _ := strings.Cut(extra, ","); host != "" {
			failed.HostAddr = net.JoinHostPort(host, port)
		}
	}
	return failed, true
}

// infoField reads one field of one section of c's node's INFO (which
// managed Redis services allow where they refuse CONFIG GET).
//
// A reply go-redis cannot parse is an error, not a panic: its INFO parser
// panics on a line before any "# Section" header (a proxy, a server that
// only speaks Redis's protocol), and the nodes are asked on goroutines of
// their own (ForEachShard, main's sentinelPolicies) that no loop's recover
// reaches, so one such node would end the process instead of being named
// as not read. go-redis drops the connection the panic left.
func infoField(ctx context.Context, c *redis.Client, section, field string) (value string, err error) {
	defer func() {
		if p := recover(); p != nil {
			value, err = "", fmt.Errorf("unreadable INFO reply: %v", p)
		}
	}()
	info := c.InfoMap(ctx, strings.ToLower(section))
	if err := info.Err(); err != nil {
		return "", err
	}
	if v := info.Item(section, field); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("INFO %s names no %s", strings.ToLower(section), field)
}
