// Command etcd starts one etcd member on loopback from etcd's embed package, for the test bed's
// kube-apiserver (scripts/apiserver.sh). It takes only what the test bed needs: a data folder and
// the client and peer URLs; it stops on SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "folder for etcd's data (required)")
	client := flag.String("listen-client-url", "http://127.0.0.1:2379", "URL that clients connect to")
	peer := flag.String("listen-peer-url", "http://127.0.0.1:2380", "URL of the member's peer port")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "etcd: --data-dir is required")
		os.Exit(2)
	}
	clientURL, err := url.Parse(*client)
	if err != nil {
		log.Fatalf("etcd: --listen-client-url %q: %v", *client, err)
	}
	peerURL, err := url.Parse(*peer)
	if err != nil {
		log.Fatalf("etcd: --listen-peer-url %q: %v", *peer, err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "testbed"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*clientURL}
	cfg.AdvertiseClientUrls = []url.URL{*clientURL}
	cfg.ListenPeerUrls = []url.URL{*peerURL}
	cfg.AdvertisePeerUrls = []url.URL{*peerURL}
	cfg.InitialCluster = cfg.Name + "=" + peerURL.String()
	cfg.LogLevel = "warn"
	// The test bed writes thousands of objects at a time; a small backend would fill up.
	cfg.QuotaBackendBytes = 8 << 30

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: start: %v", err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		fmt.Fprintf(os.Stderr, "etcd: ready on %s\n", clientURL)
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd: not ready after 60 s")
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-signals:
		fmt.Fprintf(os.Stderr, "etcd: %v, stopping\n", s)
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
}
