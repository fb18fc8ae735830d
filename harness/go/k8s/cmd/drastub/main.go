// Command drastub is a minimal DRA kubelet plugin built on the upstream
// k8s.io/dynamic-resource-allocation/kubeletplugin helper. It exists to test
// kubeletside's registration, prepare, CDI and unprepare paths independently
// of the project's own plugin: it publishes --devices devices for its node
// and, on prepare, writes one CDI spec file per claim.
//
// With --checkpoint-file it is the benchmarks' Go baseline instead (see
// bench.go): per claim it does the work of the Kubernetes project's example
// DRA driver, a CDI spec written by the CDI library and an fsynced checkpoint.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const cdiKind = "neuron.test/device"

type stub struct {
	driver string
	cdiDir string
	// prefix of the device names; the rest is the device's index.
	prefix string
	// failClaims makes prepare fail for claims with this name, to test
	// error propagation.
	failClaim string
	// bench is set in benchmark mode (--checkpoint-file).
	bench *benchState
}

type options struct {
	kubeconfig, nodeName, driver, rootDir, cdiDir, failClaim, prefix, checkpoint string
	devices                                                                      int
	qps                                                                          float64
	burst                                                                        int
}

func main() {
	var o options
	klog.InitFlags(nil)
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig")
	flag.StringVar(&o.nodeName, "node-name", "", "node name")
	flag.StringVar(&o.driver, "driver", "neuron.aws.com", "driver name")
	flag.StringVar(&o.rootDir, "root-dir", "", "kubelet root dir (plugins_registry/ and plugins/ below it)")
	flag.StringVar(&o.cdiDir, "cdi-dir", "", "where to write CDI spec files")
	flag.StringVar(&o.failClaim, "fail-claim", "", "fail NodePrepareResources for claims with this name")
	flag.StringVar(&o.prefix, "device-prefix", "neuron-", "device names are this prefix and an index")
	flag.StringVar(&o.checkpoint, "checkpoint-file", "", "benchmark mode: keep prepared claims in this checkpoint file "+
		"and write CDI specs with the CDI library, as the example DRA driver does")
	flag.IntVar(&o.devices, "devices", 4, "number of devices to publish")
	flag.Float64Var(&o.qps, "kube-api-qps", 5, "client-side limit of API requests per second; negative: none")
	flag.IntVar(&o.burst, "kube-api-burst", 10, "client-side burst of API requests")
	flag.Parse()
	if err := run(o); err != nil {
		klog.ErrorS(err, "drastub failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dataDir := filepath.Join(o.rootDir, "plugins", o.driver)
	regDir := filepath.Join(o.rootDir, "plugins_registry")
	for _, d := range []string{dataDir, regDir, o.cdiDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	node, err := client.CoreV1().Nodes().Get(ctx, o.nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	devs := make([]resourceapi.Device, 0, o.devices)
	for i := range o.devices {
		devs = append(devs, resourceapi.Device{
			Name:       fmt.Sprintf("%s%d", o.prefix, i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(int64(i))}},
		})
	}
	s := &stub{driver: o.driver, cdiDir: o.cdiDir, prefix: o.prefix, failClaim: o.failClaim}
	if o.checkpoint != "" {
		if s.bench, err = newBenchState(o.cdiDir, o.checkpoint, o.nodeName, o.driver, devs); err != nil {
			return err
		}
	}
	helper, err := kubeletplugin.Start(ctx, s,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(o.nodeName),
		kubeletplugin.NodeUID(node.UID),
		kubeletplugin.DriverName(o.driver),
		kubeletplugin.RegistrarDirectoryPath(regDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()

	if err := helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{o.nodeName: {Slices: []resourceslice.Slice{{Devices: devs}}}},
	}); err != nil {
		return err
	}
	klog.InfoS("drastub running", "driver", o.driver, "node", o.nodeName, "devices", o.devices, "bench", s.bench != nil)
	<-ctx.Done()
	return nil
}

func (s *stub) specPath(uid types.UID) string {
	return filepath.Join(s.cdiDir, "drastub-"+string(uid)+".json")
}

// claimDevices is the claim's CDI spec devices and prepared devices: both
// come from the allocation results alone.
func (s *stub) claimDevices(claim *resourceapi.ResourceClaim, extraIDs ...string) ([]cdispec.Device, []kubeletplugin.Device) {
	var specDevices []cdispec.Device
	var prepared []kubeletplugin.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != s.driver {
			continue
		}
		name := string(claim.UID) + "-" + r.Device
		index := strings.TrimPrefix(r.Device, s.prefix)
		specDevices = append(specDevices, cdispec.Device{
			Name: name,
			ContainerEdits: cdispec.ContainerEdits{
				Env: []string{"DRASTUB_DEVICE_" + index + "=" + r.Device},
				// Fully specified so that no host device has to exist.
				DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/drastub" + index, Type: "c", Major: 240, Minor: 0}},
			},
		})
		prepared = append(prepared, kubeletplugin.Device{
			Requests:     []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CDIDeviceIDs: append([]string{cdiKind + "=" + name}, extraIDs...),
		})
	}
	return specDevices, prepared
}

func (s *stub) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		klog.FromContext(ctx).Info("Prepare", "claim", klog.KObj(claim), "uid", claim.UID)
		if s.bench != nil {
			out[claim.UID] = s.bench.prepare(s, claim)
			continue
		}
		if claim.Name == s.failClaim {
			out[claim.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("drastub refuses claim %s", claim.Name)}
			continue
		}
		specDevices, prepared := s.claimDevices(claim)
		data, err := json.Marshal(cdispec.Spec{Version: "0.6.0", Kind: cdiKind, Devices: specDevices})
		if err == nil {
			err = os.WriteFile(s.specPath(claim.UID), data, 0o640)
		}
		if err != nil {
			out[claim.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: prepared}
	}
	return out, nil
}

func (s *stub) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		klog.FromContext(ctx).Info("Unprepare", "claim", claim.NamespacedName, "uid", claim.UID)
		if s.bench != nil {
			out[claim.UID] = s.bench.unprepare(claim.UID)
			continue
		}
		err := os.Remove(s.specPath(claim.UID))
		if os.IsNotExist(err) {
			err = nil
		}
		out[claim.UID] = err
	}
	return out, nil
}

func (s *stub) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}
