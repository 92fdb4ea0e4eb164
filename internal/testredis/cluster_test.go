package testredis

import (
	"context"
	"strings"
	"testing"
)

// FailMaster watches the live nodes over TLS on a TLS cluster: a plain
// client got no answer and waited out its 20 s before failing the test.
func TestFailMasterOnTLSCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	c := StartTLSCluster(t, 3)
	c.FailMaster(t, c.Addrs[0])
	cl := c.Nodes[1].Client()
	info, err := cl.ClusterInfo(context.Background()).Result()
	if err != nil || !strings.Contains(info, "cluster_state:fail") {
		t.Fatalf("CLUSTER INFO of a live node: %v, %q; want cluster_state:fail", err, info)
	}
}
