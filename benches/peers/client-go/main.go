// Command client-go-peer is client-go's informer as a peer of kube-watcher's examples/bench.rs:
// the same client CLI and the same JSON line as benches/peers/kube-rs, measured with a
// SharedInformer for pods, as client-go's users write one.
//
//	client-go-peer --url http://127.0.0.1:18080 --pods 10000 --events 100000 [--strip-managed-fields] [--json] [--fields SELECTOR]
//
// At the end of the initial sync it writes {"synced_ms":…,"sync_cpu_s":…} to stderr, as
// kube-watcher's bench does (benches/real.sh starts its writer then).
//
// See README.md for what is measured and how.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	clientfeatures "k8s.io/client-go/features"
)

func main() {
	url := flag.String("url", "", "the API server's URL (plain HTTP, no credentials); or --kubeconfig")
	kubeconfig := flag.String("kubeconfig", "", "a kubeconfig file (default $KUBECONFIG when --url is not given)")
	pods := flag.Int("pods", 10000, "pods the initial sync must hold")
	events := flag.Int("events", 100000, "watch events to receive after the sync")
	strip := flag.Bool("strip-managed-fields", false, "clear managedFields in the informer's transform")
	jsonWire := flag.Bool("json", false, "ask for JSON instead of protobuf")
	mode := flag.String("mode", "typed", "typed (client-go's Go structs; the only mode)")
	timeout := flag.Duration("timeout", 20*time.Minute, "give up after this long")
	fields := flag.String("fields", "", "a field selector (spec.nodeName=node-1: a node agent's pods)")
	flag.Parse()
	if *mode != "typed" {
		fail(2, "--mode %s: this peer has typed objects only", *mode)
	}
	config, err := restConfig(*url, *kubeconfig)
	if err != nil {
		fail(2, "%v", err)
	}
	if *jsonWire {
		config.ContentType = "application/json"
		config.AcceptContentTypes = "application/json"
	} else {
		// What kube's own components ask for built-in types.
		config.ContentType = "application/vnd.kubernetes.protobuf"
		config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	}
	// The informer must not be throttled by the client's rate limiter: one list or watch.
	config.QPS, config.Burst = 1000, 1000
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	line, err := run(ctx, config, *pods, *events, *strip, *jsonWire, *fields)
	if err != nil {
		fail(1, "%v", err)
	}
	fmt.Println(line)
	// Don't wait for the open watch to wind down: the measurement is over.
	os.Exit(0)
}

func fail(code int, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "client-go-peer: "+format+"\n", args...)
	os.Exit(code)
}

func restConfig(url, kubeconfig string) (*rest.Config, error) {
	if url != "" {
		return &rest.Config{Host: url}, nil
	}
	if kubeconfig == "" {
		kubeconfig = os.Getenv("KUBECONFIG")
	}
	if kubeconfig == "" {
		return nil, errors.New("--url or --kubeconfig (or $KUBECONFIG) is required")
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// counter is the consumer: it counts what the informer delivers after its initial list, and
// notes the time and CPU of the first such event and of the --events-th. A handler's
// notifications arrive on one goroutine, in order (after every initial-list add).
type counter struct {
	want             int
	seen             int
	first, last      time.Time
	cpuFirst, cpuEnd float64
	done             chan struct{}
}

func (c *counter) event() {
	c.seen++
	if c.seen == 1 {
		c.first, c.cpuFirst = time.Now(), cpuSeconds()
	}
	if c.seen == c.want {
		c.last, c.cpuEnd = time.Now(), cpuSeconds()
		close(c.done)
	}
}

func run(ctx context.Context, config *rest.Config, pods, events int, strip, jsonWire bool, fields string) (string, error) {
	start := time.Now()
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		return "", err
	}
	var options []informers.SharedInformerOption
	if fields != "" {
		options = append(options, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = fields }))
	}
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, options...)
	informer := factory.Core().V1().Pods().Informer()
	if strip {
		err := informer.SetTransform(func(obj any) (any, error) {
			if m, err := meta.Accessor(obj); err == nil {
				m.SetManagedFields(nil)
			}
			return obj, nil
		})
		if err != nil {
			return "", err
		}
	}
	c := &counter{want: events, done: make(chan struct{})}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, isInInitialList bool) {
			if !isInInitialList {
				c.event()
			}
		},
		UpdateFunc: func(_, _ any) { c.event() },
		DeleteFunc: func(any) { c.event() },
	})
	if err != nil {
		return "", err
	}
	factory.Start(ctx.Done())

	// The initial sync: the informer's store holds the initial list and this handler has
	// received all of it.
	select {
	case <-reg.HasSyncedChecker().Done():
	case <-ctx.Done():
		return "", errors.New("timed out before the initial sync")
	}
	initialSync := time.Since(start)
	syncCPU := cpuSeconds()
	fmt.Fprintf(os.Stderr, "{\"synced_ms\":%d,\"sync_cpu_s\":%.2f}\n", initialSync.Milliseconds(), syncCPU)
	if n := len(informer.GetStore().ListKeys()); n < pods {
		return "", fmt.Errorf("initial sync holds %d of %d pods", n, pods)
	}
	var watch time.Duration
	if events > 0 {
		select {
		case <-c.done:
		case <-ctx.Done():
			return "", errors.New("timed out before the last event")
		}
		watch = c.last.Sub(c.first)
	}
	eventsPerS := 0.0
	if watch > 0 {
		eventsPerS = float64(events) / watch.Seconds()
	}
	peer, skip := "client-go", "none"
	if strip {
		peer, skip = "client-go-strip", "managedFields"
	}
	wire := "protobuf"
	if jsonWire {
		wire = "json"
	}
	// After the measurement: the peak first, then the live heap a full collection leaves, per
	// cached pod (what the informer's store holds, in Go's own accounting).
	maxRSS := procStatusKB("VmHWM:")
	cached := len(informer.GetStore().ListKeys())
	runtime.GC()
	var mem runtime.MemStats
	runtime.ReadMemStats(&mem)
	heapPerPod := uint64(0)
	if cached > 0 {
		heapPerPod = mem.HeapAlloc / uint64(cached)
	}
	return fmt.Sprintf(`{"peer":"%s","allocator":"go","go":"%s","gogc":"%s","gomaxprocs":%d,"wire":"%s","watch_list":%t,"store":"typed","gzip":%t,"skip":"%s","n":%d,"m":%d,"initial_sync_ms":%d,"watch_ms":%d,"events_per_s":%.0f,"sync_cpu_s":%.2f,"watch_cpu_s":%.2f,"cache_len":%d,"max_rss_kb":%d,"live_heap_kb":%d,"live_heap_b_per_pod":%d}`,
		peer, runtime.Version(), gogc(), runtime.GOMAXPROCS(0), wire,
		clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient), !config.DisableCompression,
		skip, pods, events, initialSync.Milliseconds(), watch.Milliseconds(), eventsPerS,
		syncCPU, c.cpuEnd-c.cpuFirst, cached, maxRSS, mem.HeapAlloc/1024, heapPerPod), nil
}

func gogc() string {
	if v := os.Getenv("GOGC"); v != "" {
		return v
	}
	return "100"
}

// cpuSeconds is the CPU time this process has used so far, user + system, all its threads:
// fields 14 and 15 of /proc/self/stat in clock ticks of USER_HZ (100), as the other peers read it.
func cpuSeconds() float64 {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces: count from the ')' that ends it.
	s := string(stat)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseUint(fields[11], 10, 64)
	stime, _ := strconv.ParseUint(fields[12], 10, 64)
	return float64(utime+stime) / 100
}

// procStatusKB is a memory figure of /proc/self/status in KiB ("VmHWM:" the peak).
func procStatusKB(field string) int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(l, field); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb
		}
	}
	return 0
}
