// Command load fills a real API server with the bench's pods and changes them at a steady rate,
// for benches/real.sh: the peers then sync from, and watch, kube-apiserver itself.
//
//	load fill  --from http://127.0.0.1:PORT --kubeconfig K [--workers 8]
//	load write --kubeconfig K --rate 300 [--workers 8] [--except-node NODE]
//	load place --kubeconfig K --node NODE --count 30
//
// fill copies every pod that a `bench --serve` server lists (the same realistic pods the other
// benchmarks use) into the real server: namespaces are created as needed, then each pod is
// created and its status written through the status subresource (a create resets a pod's status
// to Pending), so the pods hold what the bench server's hold. Fields the server owns (uid,
// resourceVersion, creationTimestamp, managedFields) are cleared first: the server writes its
// own managedFields (one entry for the create, one for the status). Pods that already exist are
// left as they are, so an interrupted fill can be run again.
//
// write changes one pod's annotation at a time, round robin over every pod of the server, at
// --rate changes a second (a merge patch each: one MODIFIED event per change; the values are
// the run's own, so a run never repeats an earlier run's, which would change nothing), until
// killed. It
// prints, once a second on stderr, how many changes it made and how many fell behind schedule.
// With --except-node it leaves the pods bound to that node alone (a node agent watching them
// sees nothing change while the rest of the cluster does).
//
// place makes sure that --count pods are bound to --node (spec.nodeName): it creates the
// missing ones (agent-0, agent-1, … in the namespace of the server's first pod), each a copy of
// that pod with its status written, as fill does. A node agent's watch
// (fieldSelector=spec.nodeName=NODE) then holds exactly those.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: load fill|write [flags] (see the comment at the top of load/main.go)")
	}
	cmd, args := os.Args[1], os.Args[2:]
	flags := flag.NewFlagSet(cmd, flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "the real server's kubeconfig")
	workers := flags.Int("workers", 8, "requests in flight")
	from := flags.String("from", "", "fill: the bench server's URL (plain HTTP)")
	rate := flags.Float64("rate", 300, "write: changes a second")
	exceptNode := flags.String("except-node", "", "write: leave the pods bound to this node alone")
	node := flags.String("node", "", "place: the node the pods are bound to")
	count := flags.Int("count", 30, "place: how many pods the node holds")
	_ = flags.Parse(args)
	if *workers < 1 || *workers > 256 {
		fail("--workers %d: between 1 and 256", *workers)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("--kubeconfig %q: %v", *kubeconfig, err)
	}
	// Protobuf, as Kubernetes' components write; no client-side throttling: the server's own
	// limits are the ones that count.
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.QPS, config.Burst = -1, 0
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("client: %v", err)
	}
	switch cmd {
	case "fill":
		if *from == "" {
			fail("fill: --from is required")
		}
		fill(client, *from, *workers)
	case "write":
		if !(*rate > 0 && *rate <= 100000) {
			fail("--rate %v: between 0 and 100000 changes a second", *rate)
		}
		write(client, *rate, *workers, *exceptNode)
	case "place":
		if *node == "" || *count < 1 || *count > 100000 {
			fail("place: --node is required, and --count between 1 and 100000")
		}
		place(client, *node, *count)
	default:
		fail("unknown command %q: fill, write or place", cmd)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "load: "+format+"\n", args...)
	os.Exit(1)
}

// fill lists the bench server page by page and creates each page's pods before the next.
func fill(client *kubernetes.Clientset, from string, workers int) {
	ctx := context.Background()
	namespaces := map[string]bool{}
	var created, existed atomic.Int64
	start := time.Now()
	next := ""
	for {
		url := from + "/api/v1/pods?limit=500"
		if next != "" {
			url += "&continue=" + next
		}
		var page corev1.PodList
		if err := getJSON(url, &page); err != nil {
			fail("list %s: %v", url, err)
		}
		for i := range page.Items {
			ns := page.Items[i].Namespace
			if ns != "" && !namespaces[ns] {
				_, err := client.CoreV1().Namespaces().Create(ctx,
					&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					fail("namespace %s: %v", ns, err)
				}
				namespaces[ns] = true
			}
		}
		jobs := make(chan *corev1.Pod)
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for pod := range jobs {
					if createWithStatus(ctx, client, pod) {
						created.Add(1)
					} else {
						existed.Add(1)
					}
				}
			}()
		}
		for i := range page.Items {
			jobs <- &page.Items[i]
		}
		close(jobs)
		wg.Wait()
		fmt.Fprintf(os.Stderr, "load: %d created, %d already there, %.0f s\n",
			created.Load(), existed.Load(), time.Since(start).Seconds())
		next = page.Continue
		if next == "" {
			break
		}
	}
}

// createWithStatus creates the pod, then writes its status; false when it existed already.
func createWithStatus(ctx context.Context, client *kubernetes.Clientset, pod *corev1.Pod) bool {
	status := pod.Status
	pod.UID, pod.ResourceVersion, pod.ManagedFields = "", "", nil
	pod.CreationTimestamp = metav1.Time{}
	pods := client.CoreV1().Pods(pod.Namespace)
	made, err := pods.Create(ctx, pod, metav1.CreateOptions{FieldManager: "bench-load"})
	if apierrors.IsAlreadyExists(err) {
		return false
	}
	if err != nil {
		fail("create %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	made.Status = status
	if _, err := pods.UpdateStatus(ctx, made, metav1.UpdateOptions{FieldManager: "bench-load"}); err != nil {
		fail("status of %s/%s: %v", pod.Namespace, pod.Name, err)
	}
	return true
}

func getJSON(url string, into any) error {
	res, err := http.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 300))
		return fmt.Errorf("HTTP %d: %s", res.StatusCode, body)
	}
	return json.NewDecoder(res.Body).Decode(into)
}

// write patches pods round robin at `rate` a second, spread over `workers` goroutines.
func write(client *kubernetes.Clientset, rate float64, workers int, exceptNode string) {
	ctx := context.Background()
	list, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		fail("list pods: %v", err)
	}
	if len(list.Items) == 0 {
		fail("the server has no pods to change: run `load fill` first")
	}
	type target struct{ ns, name string }
	targets := make([]target, 0, len(list.Items))
	for _, p := range list.Items {
		if exceptNode == "" || p.Spec.NodeName != exceptNode {
			targets = append(targets, target{p.Namespace, p.Name})
		}
	}
	list = nil
	if len(targets) == 0 {
		fail("every pod of the server is bound to %s: nothing to change", exceptNode)
	}
	jobs := make(chan int, workers)
	var done, failed, late atomic.Int64
	// Each run's values are its own: a patch that set the value a pod already holds (an earlier
	// run's n) would change nothing, and the server sends no event for it.
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for w := 0; w < workers; w++ {
		go func() {
			for n := range jobs {
				t := targets[n%len(targets)]
				patch := []byte(`{"metadata":{"annotations":{"bench/tick":"` + run + "-" + strconv.Itoa(n) + `"}}}`)
				_, err := client.CoreV1().Pods(t.ns).Patch(ctx, t.name, types.MergePatchType, patch,
					metav1.PatchOptions{FieldManager: "bench-write"})
				if err != nil {
					if failed.Add(1) <= 5 {
						fmt.Fprintf(os.Stderr, "load: patch %s/%s: %v\n", t.ns, t.name, err)
					}
					continue
				}
				done.Add(1)
			}
		}()
	}
	go func() {
		for range time.Tick(time.Second) {
			fmt.Fprintf(os.Stderr, "load: %d changes, %d failed, %d sent late\n", done.Load(), failed.Load(), late.Load())
		}
	}()
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * interval)
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		} else if wait < -time.Second {
			late.Add(1)
		}
		jobs <- n
	}
}

// place binds --count pods to node: the missing ones are copies of the server's first pod.
func place(client *kubernetes.Clientset, node string, count int) {
	ctx := context.Background()
	there, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		fail("list the pods of %s: %v", node, err)
	}
	if len(there.Items) >= count {
		fmt.Fprintf(os.Stderr, "load: %s holds %d pods already\n", node, len(there.Items))
		return
	}
	first, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil || len(first.Items) == 0 {
		fail("place: the server has no pod to copy (run `load fill` first): %v", err)
	}
	made := 0
	for i := 0; i < count; i++ {
		pod := first.Items[0].DeepCopy()
		pod.Name, pod.GenerateName = fmt.Sprintf("agent-%d", i), ""
		pod.Spec.NodeName = node
		if createWithStatus(ctx, client, pod) {
			made++
		}
	}
	fmt.Fprintf(os.Stderr, "load: %d pods placed on %s\n", made, node)
}
