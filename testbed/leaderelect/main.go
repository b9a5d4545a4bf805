// Command leaderelect runs one client-go leader elector (k8s.io/client-go/tools/leaderelection
// over a LeaseLock, ReleaseOnCancel) for tests/real/scale_out.rs, which runs it beside
// kube-watcher's LeaderElector on one Lease. It prints one line on stdout per change of its own
// view:
//
//	leading    it acquired the Lease (OnStartedLeading)
//	stopped    it no longer leads (OnStoppedLeading after it led: it could not renew in time)
//	stopping   SIGTERM or SIGINT: it stops acting as the leader now, then releases the Lease
//	           (ReleaseOnCancel) and exits
//
// Having lost the lead, it runs for it again, until it is stopped.
//
// Usage: leaderelect KUBECONFIG NAMESPACE LEASE IDENTITY LEASE_SECONDS RENEW_MS RETRY_MS
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

func main() {
	if len(os.Args) != 8 {
		fmt.Fprintln(os.Stderr, "usage: leaderelect KUBECONFIG NAMESPACE LEASE IDENTITY LEASE_SECONDS RENEW_MS RETRY_MS")
		os.Exit(2)
	}
	number := func(i int) int {
		n, err := strconv.Atoi(os.Args[i])
		if err != nil {
			fmt.Fprintf(os.Stderr, "leaderelect: argument %d: %v\n", i, err)
			os.Exit(2)
		}
		return n
	}
	config, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "leaderelect: %v\n", err)
		os.Exit(1)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fmt.Fprintf(os.Stderr, "leaderelect: %v\n", err)
		os.Exit(1)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: os.Args[2], Name: os.Args[3]},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: os.Args[4]},
	}
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		// Said before the context ends: the leader stops acting now. The release follows a
		// moment later, so that whoever reads these lines has read this one before another
		// elector can take the Lease.
		fmt.Println("stopping")
		time.Sleep(200 * time.Millisecond)
		cancel()
	}()
	var leading atomic.Bool
	for ctx.Err() == nil {
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   time.Duration(number(5)) * time.Second,
			RenewDeadline:   time.Duration(number(6)) * time.Millisecond,
			RetryPeriod:     time.Duration(number(7)) * time.Millisecond,
			ReleaseOnCancel: true,
			Name:            os.Args[3],
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) {
					leading.Store(true)
					fmt.Println("leading")
				},
				OnStoppedLeading: func() {
					// Called at the end of every run, led or not.
					if leading.Swap(false) && ctx.Err() == nil {
						fmt.Println("stopped")
					}
				},
			},
		})
		if err != nil {
			fmt.Fprintf(os.Stderr, "leaderelect: %v\n", err)
			os.Exit(2)
		}
		elector.Run(ctx)
	}
}
