// Command kubeletside stands in for the DRA-related part of one kubelet.
//
// It uses the kubelet's own plugin manager (registration socket watcher) and
// DRA manager, so DRA kubelet plugins are exercised by exactly the client code
// a real kubelet runs: registration, NodePrepareResources,
// NodeUnprepareResources, health streaming and the ResourceSlice wiping at
// start-up. Containers are not run. Instead, after a successful prepare the CDI
// device ids handed to each container are resolved and injected into an empty
// OCI spec with the CDI package container runtimes use, the outcome is
// published on the pod (annotation, events) and in a JSON-lines report, and the
// pod is marked Running. The kubelet's PodResources API is served too, by the
// kubelet's own server over these pods and the DRA manager.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	pluginwatcherapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	kubefeatures "k8s.io/kubernetes/pkg/features"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

const (
	// AnnotationCDIDevices holds, as JSON, what each container would have
	// received from the container runtime.
	AnnotationCDIDevices = "kubeletside.neuron.test/cdi-devices"
	// AnnotationPrepareError holds the last prepare (or CDI resolution)
	// error; it is removed once the pod starts.
	AnnotationPrepareError = "kubeletside.neuron.test/prepare-error"

	// Event reasons as the kubelet uses them, so tests written against this
	// program read like tests against a real node.
	reasonFailedPrepare = "FailedPrepareDynamicResources"
	reasonFailedCDI     = "FailedCreatePodSandBox"
	reasonStarted       = "Started"
	reasonFailedKilling = "FailedKillPod"
)

type options struct {
	kubeconfig   string
	nodeName     string
	rootDir      string
	cdiDirs      stringList
	reportFile   string
	statusAddr   string
	featureGates string
}

type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// ContainerDevices is what one container would get from the runtime.
type ContainerDevices struct {
	CDIDevices  []string          `json:"cdiDevices"`
	Env         []string          `json:"env"`
	DeviceNodes []string          `json:"deviceNodes"`
	Mounts      []string          `json:"mounts"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ReportEntry is one line of the JSON-lines report file.
type ReportEntry struct {
	Time       string                      `json:"time"`
	Node       string                      `json:"node"`
	Event      string                      `json:"event"`
	Namespace  string                      `json:"namespace,omitempty"`
	Pod        string                      `json:"pod,omitempty"`
	UID        string                      `json:"uid,omitempty"`
	Driver     string                      `json:"driver,omitempty"`
	Endpoint   string                      `json:"endpoint,omitempty"`
	Error      string                      `json:"error,omitempty"`
	Detail     string                      `json:"detail,omitempty"`
	Containers map[string]ContainerDevices `json:"containers,omitempty"`
}

type reporter struct {
	mu   sync.Mutex
	node string
	file *os.File
}

func (r *reporter) write(e ReportEntry) {
	e.Time = time.Now().UTC().Format(time.RFC3339Nano)
	e.Node = r.node
	line, err := json.Marshal(e)
	if err != nil {
		klog.ErrorS(err, "Encoding report entry")
		return
	}
	klog.InfoS("Report", "entry", string(line))
	if r.file == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// One write per line keeps lines intact for concurrent readers.
	if _, err := r.file.Write(append(line, '\n')); err != nil {
		klog.ErrorS(err, "Writing report file")
	}
}

// registrationTracker wraps the DRA manager's registration handler so that
// registrations show up in the log, the report and the status endpoint. All
// decisions stay with the wrapped handler.
type registrationTracker struct {
	inner    pluginHandler
	report   *reporter
	mu       sync.Mutex
	endpoint map[string]string
}

func (t *registrationTracker) validate(ctx context.Context, name, endpoint string, versions []string) error {
	err := t.inner.validate(ctx, name, endpoint, versions)
	klog.InfoS("Validate DRA plugin", "driver", name, "endpoint", endpoint, "versions", versions, "err", err)
	if err != nil {
		t.report.write(ReportEntry{Event: "plugin-rejected", Driver: name, Endpoint: endpoint, Error: err.Error()})
	}
	return err
}

func (t *registrationTracker) register(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	err := t.inner.register(ctx, name, endpoint, versions, timeout)
	klog.InfoS("Register DRA plugin", "driver", name, "endpoint", endpoint, "versions", versions, "err", err)
	entry := ReportEntry{Event: "plugin-registered", Driver: name, Endpoint: endpoint}
	if err != nil {
		entry.Event = "plugin-rejected"
		entry.Error = err.Error()
	}
	// Report before /plugins changes, so that readers of /plugins also
	// find the entry.
	t.report.write(entry)
	if err == nil {
		t.mu.Lock()
		t.endpoint[name] = endpoint
		t.mu.Unlock()
	}
	return err
}

func (t *registrationTracker) deregister(ctx context.Context, name, endpoint string) {
	t.inner.deregister(ctx, name, endpoint)
	klog.InfoS("Deregister DRA plugin", "driver", name, "endpoint", endpoint)
	t.report.write(ReportEntry{Event: "plugin-deregistered", Driver: name, Endpoint: endpoint})
	t.mu.Lock()
	if t.endpoint[name] == endpoint {
		delete(t.endpoint, name)
	}
	t.mu.Unlock()
}

func (t *registrationTracker) snapshot() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.endpoint))
	for k, v := range t.endpoint {
		out[k] = v
	}
	return out
}

type kubeletSide struct {
	opts       options
	client     kubernetes.Interface
	podLister  corelisters.PodLister
	podsSynced cache.InformerSynced
	draManager draManager
	recorder   record.EventRecorder
	report     *reporter
	tracker    *registrationTracker
	queue      workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// lastSeen keeps the last object of each pod so that a pod removed
	// from the API without passing through this program (force deletion)
	// still gets its resources unprepared.
	lastSeen map[string]*v1.Pod
	uidToKey map[types.UID]string
	started  sets.Set[types.UID]
}

func main() {
	var opts options
	klog.InitFlags(nil)
	flag.StringVar(&opts.kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	flag.StringVar(&opts.nodeName, "node-name", "", "name of the Node object this program serves")
	flag.StringVar(&opts.rootDir, "root-dir", "", "kubelet root dir; plugins_registry/, plugins/, pod-resources/ and the DRA state file live here")
	flag.Var(&opts.cdiDirs, "cdi-dir", "directory with CDI spec files (repeatable)")
	flag.StringVar(&opts.reportFile, "report-file", "", "append JSON lines describing registrations and pod outcomes here")
	flag.StringVar(&opts.statusAddr, "status-addr", "", "serve /healthz, /readyz, /plugins and /pods on this address (host:port)")
	flag.StringVar(&opts.featureGates, "feature-gates", "", "kubelet feature gates, key=value,...")
	flag.Parse()
	if opts.kubeconfig == "" || opts.nodeName == "" || opts.rootDir == "" || len(opts.cdiDirs) == 0 {
		fmt.Fprintln(os.Stderr, "--kubeconfig, --node-name, --root-dir and --cdi-dir are required")
		os.Exit(2)
	}
	if err := run(opts); err != nil {
		klog.ErrorS(err, "kubeletside failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run(opts options) error {
	if opts.featureGates != "" {
		if err := utilfeature.DefaultMutableFeatureGate.Set(opts.featureGates); err != nil {
			return fmt.Errorf("--feature-gates: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	startupWipe := make(chan struct{})
	var startupWipeOnce sync.Once
	var rep *reporter
	// A text logger of its own under the tap, installed as klog's global
	// logger too: the 1.33 DRA manager logs its start-up wipe through the
	// global logger, later ones through the logger they are given.
	base := textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(verbosity())))
	logger := logr.New(&tapSink{inner: base.GetSink(), tap: func(names []string, msg string, kv []any) {
		if msg != "Deleted ResourceSlices" && msg != "ResourceSlices not found, nothing to delete." {
			return
		}
		if slices.Contains(names, "startup") {
			startupWipeOnce.Do(func() { close(startupWipe) })
		}
		if rep != nil {
			rep.write(ReportEntry{Event: "slices-wiped", Detail: formatKV(kv)})
		}
	}}).WithValues("node", opts.nodeName)
	klog.SetLoggerWithOptions(logger, klog.ContextualLogger(true))
	ctx = klog.NewContext(ctx, logger)

	regDir := filepath.Join(opts.rootDir, "plugins_registry")
	for _, dir := range append([]string{regDir, filepath.Join(opts.rootDir, "plugins")}, opts.cdiDirs...) {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", opts.kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	cfg.UserAgent = "kubeletside/" + opts.nodeName
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	rep = &reporter{node: opts.nodeName}
	if opts.reportFile != "" {
		f, err := os.OpenFile(opts.reportFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
		if err != nil {
			return fmt.Errorf("open report file: %w", err)
		}
		defer func() { _ = f.Close() }()
		rep.file = f
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(3)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, v1.EventSource{Component: "kubelet", Host: opts.nodeName})

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", opts.nodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()

	k := &kubeletSide{
		opts:      opts,
		client:    client,
		podLister: podInformer.Lister(),
		recorder:  recorder,
		report:    rep,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			// The kubelet's pod workers back off from 10s up to 5 minutes;
			// a shorter start keeps tests fast while keeping the shape.
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](time.Second, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"}),
		lastSeen: map[string]*v1.Pod{},
		uidToKey: map[types.UID]string{},
		started:  sets.New[types.UID](),
	}
	k.podsSynced = podInformer.Informer().HasSynced
	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.enqueue(obj) },
		UpdateFunc: func(_, obj any) { k.enqueue(obj) },
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			k.enqueue(obj)
		},
	}); err != nil {
		return err
	}

	k.draManager, err = newDRAManager(logger, client, opts.rootDir, opts.nodeName)
	if err != nil {
		return fmt.Errorf("create DRA manager: %w", err)
	}
	sourcesReady := kubeletconfig.NewSourcesReady(func(sets.Set[string]) bool { return k.podsSynced() })
	getNode := nodeGetter(ctx, func(ctx context.Context) (*v1.Node, error) {
		return client.CoreV1().Nodes().Get(ctx, opts.nodeName, metav1.GetOptions{})
	})
	// Start also wipes this node's ResourceSlices in the background, as the
	// kubelet does at start-up.
	if err := k.draManager.Start(ctx, k.activePods, getNode, sourcesReady); err != nil {
		return fmt.Errorf("start DRA manager: %w", err)
	}
	k.tracker = &registrationTracker{inner: adaptHandler(k.draManager.GetWatcherHandler()), report: rep, endpoint: map[string]string{}}
	podResourcesSocket, err := servePodResources(ctx, opts.rootDir, k)
	if err != nil {
		return fmt.Errorf("serve the podresources API: %w", err)
	}

	pm := pluginmanager.NewPluginManager(regDir, recorder)
	pm.AddHandler(pluginwatcherapi.DRAPlugin, pluginHandlerOf(ctx, k.tracker))

	factory.Start(ctx.Done())
	go runPluginManager(ctx, pm, sourcesReady)
	go watchHealth(ctx, k.draManager, k.podsWithNewHealth)

	var ready sync.WaitGroup
	ready.Add(1)
	if opts.statusAddr != "" {
		if err := k.serveStatus(ctx, &ready); err != nil {
			return err
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), k.podsSynced) {
		return errors.New("pod informer did not sync")
	}
	// Ready means: slices published from now on survive, as after a
	// kubelet start. The wipe retries until the Node exists.
	select {
	case <-startupWipe:
	case <-ctx.Done():
		return nil
	}
	// Report first: whoever sees /readyz succeed also finds the entry.
	klog.InfoS("kubeletside ready", "node", opts.nodeName, "registrationDir", regDir, "cdiDirs", []string(opts.cdiDirs),
		"podResourcesSocket", podResourcesSocket)
	rep.write(ReportEntry{Event: "ready"})
	ready.Done()

	go func() {
		<-ctx.Done()
		k.queue.ShutDown()
	}()
	const workers = 2
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k.processNext(ctx) {
			}
		}()
	}
	wg.Wait()
	klog.InfoS("kubeletside stopping", "node", opts.nodeName)
	return nil
}

func (k *kubeletSide) serveStatus(ctx context.Context, ready *sync.WaitGroup) error {
	isReady := make(chan struct{})
	go func() { ready.Wait(); close(isReady) }()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-isReady:
			_, _ = w.Write([]byte("ok"))
		default:
			http.Error(w, "pod informer not synced", http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("/plugins", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(k.tracker.snapshot())
	})
	ln, err := net.Listen("tcp", k.opts.statusAddr)
	if err != nil {
		return fmt.Errorf("listen on --status-addr: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Status server")
		}
	}()
	klog.InfoS("Serving status", "addr", ln.Addr().String())
	return nil
}

func (k *kubeletSide) enqueue(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	key := pod.Namespace + "/" + pod.Name
	k.mu.Lock()
	k.uidToKey[pod.UID] = key
	k.mu.Unlock()
	k.queue.Add(key)
}

// activePods mirrors the kubelet's notion: pods bound here that are not
// terminal. The DRA manager's reconcile loop unprepares claims of pods that
// drop out of this list.
func (k *kubeletSide) activePods() []*v1.Pod {
	pods, err := k.podLister.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := make([]*v1.Pod, 0, len(pods))
	for _, p := range pods {
		if !isTerminal(p) {
			out = append(out, p)
		}
	}
	return out
}

func isTerminal(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed
}

// podsWithNewHealth re-syncs pods whose devices changed health, which is
// how the kubelet refreshes allocatedResourcesStatus.
func (k *kubeletSide) podsWithNewHealth(uids []string) {
	for _, uid := range uids {
		k.mu.Lock()
		key, ok := k.uidToKey[types.UID(uid)]
		k.mu.Unlock()
		klog.InfoS("Device health changed", "podUID", uid, "pod", key)
		if ok {
			k.queue.Add(key)
		}
	}
}

func (k *kubeletSide) processNext(ctx context.Context) bool {
	key, quit := k.queue.Get()
	if quit {
		return false
	}
	defer k.queue.Done(key)
	if err := k.sync(ctx, key); err != nil {
		klog.InfoS("Pod sync failed, will retry", "pod", key, "err", err, "requeues", k.queue.NumRequeues(key))
		k.queue.AddRateLimited(key)
		return true
	}
	k.queue.Forget(key)
	return true
}

func (k *kubeletSide) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := k.podLister.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return k.forget(ctx, key)
	}
	if err != nil {
		return err
	}
	k.mu.Lock()
	if old := k.lastSeen[key]; old != nil && old.UID != pod.UID {
		// A pod with the same name replaced one that vanished without a
		// deletion pass here; release the old one first.
		k.mu.Unlock()
		if err := k.unprepare(ctx, old); err != nil {
			return err
		}
		k.mu.Lock()
	}
	k.lastSeen[key] = pod
	k.mu.Unlock()

	switch {
	case pod.DeletionTimestamp != nil:
		return k.terminate(ctx, pod)
	case pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed:
		return k.unprepare(ctx, pod)
	default:
		return k.start(ctx, pod)
	}
}

func (k *kubeletSide) forget(ctx context.Context, key string) error {
	k.mu.Lock()
	old := k.lastSeen[key]
	k.mu.Unlock()
	if old == nil {
		return nil
	}
	if err := k.unprepare(ctx, old); err != nil {
		return err
	}
	k.mu.Lock()
	if k.lastSeen[key] == old {
		delete(k.lastSeen, key)
		delete(k.uidToKey, old.UID)
		k.started.Delete(old.UID)
	}
	k.mu.Unlock()
	return nil
}

func (k *kubeletSide) unprepare(ctx context.Context, pod *v1.Pod) error {
	if !k.draManager.PodMightNeedToUnprepareResources(pod.UID) {
		return nil
	}
	klog.InfoS("Unpreparing resources", "pod", klog.KObj(pod), "podUID", pod.UID)
	if err := k.draManager.UnprepareResources(ctx, pod); err != nil {
		k.recorder.Eventf(pod, v1.EventTypeWarning, reasonFailedKilling, "error killing pod: %v", err)
		k.report.write(ReportEntry{Event: "unprepare-error", Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID), Error: err.Error()})
		return err
	}
	k.report.write(ReportEntry{Event: "unprepared", Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID)})
	return nil
}

// terminate finishes a graceful deletion the way the kubelet does: resources
// are unprepared before the pod object goes away.
func (k *kubeletSide) terminate(ctx context.Context, pod *v1.Pod) error {
	if err := k.unprepare(ctx, pod); err != nil {
		return err
	}
	zero := int64(0)
	err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &zero,
		Preconditions:      &metav1.Preconditions{UID: &pod.UID},
	})
	switch {
	case err == nil:
		klog.InfoS("Pod terminated", "pod", klog.KObj(pod), "podUID", pod.UID)
		k.report.write(ReportEntry{Event: "deleted", Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID)})
		return nil
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Already gone, or replaced by a pod with the same name.
		return nil
	default:
		return fmt.Errorf("delete pod: %w", err)
	}
}

func (k *kubeletSide) start(ctx context.Context, pod *v1.Pod) error {
	k.mu.Lock()
	started := k.started.Has(pod.UID)
	k.mu.Unlock()
	if started || pod.Status.Phase == v1.PodRunning {
		// The kubelet prepares resources only when it creates the pod
		// sandbox; a running pod is left alone apart from health status.
		if utilfeature.DefaultFeatureGate.Enabled(kubefeatures.ResourceHealthStatus) {
			return k.markRunning(ctx, pod)
		}
		return nil
	}
	if err := k.draManager.PrepareResources(ctx, pod); err != nil {
		klog.InfoS("Prepare failed", "pod", klog.KObj(pod), "err", err)
		k.recorder.Eventf(pod, v1.EventTypeWarning, reasonFailedPrepare, "Failed to prepare dynamic resources: %v", err)
		return k.failed(ctx, pod, "prepare-error", err)
	}
	containers, err := k.resolveCDI(pod)
	if err != nil {
		klog.InfoS("CDI resolution failed", "pod", klog.KObj(pod), "err", err)
		k.recorder.Eventf(pod, v1.EventTypeWarning, reasonFailedCDI, "Failed to inject CDI devices: %v", err)
		return k.failed(ctx, pod, "cdi-error", err)
	}
	encoded, err := json.Marshal(containers)
	if err != nil {
		return err
	}
	pod, err = k.patchAnnotations(ctx, pod, map[string]*string{
		AnnotationCDIDevices:   ptr(string(encoded)),
		AnnotationPrepareError: nil,
	})
	if err != nil {
		return err
	}
	if err := k.markRunning(ctx, pod); err != nil {
		return err
	}
	// The informer may still deliver the pre-update object; this keeps a
	// started pod from being started twice.
	k.mu.Lock()
	k.started.Insert(pod.UID)
	k.mu.Unlock()
	klog.InfoS("Pod running", "pod", klog.KObj(pod), "podUID", pod.UID, "containers", string(encoded))
	k.recorder.Eventf(pod, v1.EventTypeNormal, reasonStarted, "Resources prepared, CDI devices resolved")
	k.report.write(ReportEntry{Event: "prepared", Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID), Containers: containers})
	return nil
}

// failed makes the error visible on the pod and returns it so that the item
// is retried with backoff; the pod stays Pending.
func (k *kubeletSide) failed(ctx context.Context, pod *v1.Pod, event string, cause error) error {
	k.report.write(ReportEntry{Event: event, Namespace: pod.Namespace, Pod: pod.Name, UID: string(pod.UID), Error: cause.Error()})
	if _, err := k.patchAnnotations(ctx, pod, map[string]*string{AnnotationPrepareError: ptr(cause.Error())}); err != nil {
		klog.ErrorS(err, "Recording prepare error on pod", "pod", klog.KObj(pod))
	}
	return cause
}

// patchAnnotations returns the pod as stored afterwards, so that a following
// status update does not conflict with the annotation change.
func (k *kubeletSide) patchAnnotations(ctx context.Context, pod *v1.Pod, values map[string]*string) (*v1.Pod, error) {
	changed := false
	for key, v := range values {
		cur, has := pod.Annotations[key]
		if (v == nil && has) || (v != nil && (!has || cur != *v)) {
			changed = true
		}
	}
	// Unchanged annotations would cause no watch event anyway, but skipping
	// the request keeps the retry loop quiet.
	if !changed {
		return pod, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": values}})
	if err != nil {
		return nil, err
	}
	updated, err := k.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patch pod annotations: %w", err)
	}
	return updated, nil
}

// resolveCDI does what a container runtime does with the CDI ids the kubelet
// passes in the CRI request: look them up in the spec dirs and apply the
// edits to the container's OCI spec.
func (k *kubeletSide) resolveCDI(pod *v1.Pod) (map[string]ContainerDevices, error) {
	// A fresh cache per pod: the plugin writes spec files right before
	// answering NodePrepareResources, and auto-refresh is asynchronous.
	cdiCache, err := cdi.NewCache(cdi.WithSpecDirs(k.opts.cdiDirs...), cdi.WithAutoRefresh(false))
	if err != nil && cdiCache == nil {
		return nil, fmt.Errorf("CDI cache: %w", err)
	}
	if err := cdiCache.Refresh(); err != nil {
		// Broken files are reported but do not hide valid ones, as in
		// container runtimes.
		klog.InfoS("CDI spec problems", "err", err)
	}
	out := map[string]ContainerDevices{}
	all := make([]v1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	all = append(all, pod.Spec.InitContainers...)
	all = append(all, pod.Spec.Containers...)
	for i := range all {
		c := &all[i]
		info, err := k.draManager.GetResources(pod, c)
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", c.Name, err)
		}
		ids := make([]string, 0, len(info.CDIDevices))
		for _, d := range info.CDIDevices {
			ids = append(ids, d.Name)
		}
		cd := ContainerDevices{CDIDevices: ids, Env: []string{}, DeviceNodes: []string{}, Mounts: []string{}}
		if len(ids) > 0 {
			spec := &oci.Spec{Version: oci.Version, Process: &oci.Process{}, Linux: &oci.Linux{}}
			if unresolved, err := cdiCache.InjectDevices(spec, ids...); err != nil {
				return nil, fmt.Errorf("container %s: %w (unresolved: %v, spec errors: %v)",
					c.Name, err, unresolved, cdiCache.GetErrors())
			}
			cd.Env = append(cd.Env, spec.Process.Env...)
			for _, d := range spec.Linux.Devices {
				cd.DeviceNodes = append(cd.DeviceNodes, d.Path)
			}
			for _, m := range spec.Mounts {
				cd.Mounts = append(cd.Mounts, m.Source+":"+m.Destination)
			}
			cd.Annotations = spec.Annotations
			sort.Strings(cd.Env)
		}
		out[c.Name] = cd
	}
	return out, nil
}

func (k *kubeletSide) markRunning(ctx context.Context, pod *v1.Pod) error {
	now := metav1.Now()
	status := pod.Status.DeepCopy()
	status.Phase = v1.PodRunning
	if status.StartTime == nil {
		status.StartTime = &now
	}
	for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
		setCondition(status, t, now)
	}
	node, err := k.client.CoreV1().Nodes().Get(ctx, k.opts.nodeName, metav1.GetOptions{})
	if err == nil {
		for _, a := range node.Status.Addresses {
			if a.Type == v1.NodeInternalIP {
				status.HostIP = a.Address
				status.HostIPs = []v1.HostIP{{IP: a.Address}}
			}
		}
	}
	status.InitContainerStatuses = containerStatuses(pod, pod.Spec.InitContainers, status.InitContainerStatuses, true, now)
	status.ContainerStatuses = containerStatuses(pod, pod.Spec.Containers, status.ContainerStatuses, false, now)
	if utilfeature.DefaultFeatureGate.Enabled(kubefeatures.ResourceHealthStatus) {
		updateHealthStatus(ctx, k.draManager, pod, status)
	}
	updated := pod.DeepCopy()
	updated.Status = *status
	_, err = k.client.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("update pod status: %w", err)
	}
	return nil
}

func setCondition(status *v1.PodStatus, t v1.PodConditionType, now metav1.Time) {
	for i := range status.Conditions {
		if status.Conditions[i].Type == t {
			if status.Conditions[i].Status != v1.ConditionTrue {
				status.Conditions[i].Status = v1.ConditionTrue
				status.Conditions[i].LastTransitionTime = now
				status.Conditions[i].Reason = ""
				status.Conditions[i].Message = ""
			}
			return
		}
	}
	status.Conditions = append(status.Conditions, v1.PodCondition{Type: t, Status: v1.ConditionTrue, LastTransitionTime: now})
}

func containerStatuses(pod *v1.Pod, containers []v1.Container, old []v1.ContainerStatus, init bool, now metav1.Time) []v1.ContainerStatus {
	prev := map[string]v1.ContainerStatus{}
	for _, s := range old {
		prev[s.Name] = s
	}
	out := make([]v1.ContainerStatus, 0, len(containers))
	for _, c := range containers {
		s, ok := prev[c.Name]
		if !ok {
			s = v1.ContainerStatus{Name: c.Name}
		}
		s.Image = c.Image
		s.ImageID = "kubeletside://" + c.Image
		s.ContainerID = "kubeletside://" + string(pod.UID) + "/" + c.Name
		if init {
			// Init containers are reported as completed: nothing runs.
			if s.State.Terminated == nil {
				s.State = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}}
			}
			s.Ready = true
		} else {
			if s.State.Running == nil {
				s.State = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: now}}
			}
			s.Ready = true
			s.Started = ptr(true)
		}
		out = append(out, s)
	}
	return out
}

// verbosity is klog's -v flag.
func verbosity() int {
	v, err := strconv.Atoi(flag.Lookup("v").Value.String())
	if err != nil {
		return 0
	}
	return v
}

func ptr[T any](v T) *T { return &v }

func formatKV(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%v=%v", kv[i], kv[i+1])
	}
	return b.String()
}
