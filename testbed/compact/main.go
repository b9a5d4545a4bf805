// Command compact compacts the test bed's etcd to its current revision, as kube-apiserver's own
// compactor does every --etcd-compaction-interval: every resourceVersion handed out before is
// gone, so a LIST, a continue token or a WATCH at one of them that is served from etcd (not from
// the API server's watch cache) gets 410 Gone.
// Usage: compact http://127.0.0.1:PORT
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: compact ETCD_URL")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{os.Args[1]}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintf(os.Stderr, "compact: connect to %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	defer c.Close()
	// A write of a key outside kube-apiserver's /registry prefix moves the revision past every
	// version the API server has handed out, so all of them are compacted away (etcd keeps the
	// revision it compacts at readable).
	resp, err := c.Put(ctx, "/kube-watcher-testbed/compact", time.Now().String())
	if err != nil {
		fmt.Fprintf(os.Stderr, "compact: write to move the revision: %v\n", err)
		os.Exit(1)
	}
	rev := resp.Header.Revision
	// Compacted already by someone else (another test, at the same revision): just as good.
	if _, err := c.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		fmt.Fprintf(os.Stderr, "compact: at revision %d: %v\n", rev, err)
		os.Exit(1)
	}
	fmt.Println(rev)
}
