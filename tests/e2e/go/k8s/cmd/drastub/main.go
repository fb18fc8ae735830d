// Command drastub is a minimal DRA kubelet plugin built on the upstream
// k8s.io/dynamic-resource-allocation/kubeletplugin helper. It exists only to
// test kubeletside's registration, prepare, CDI and unprepare paths
// independently of the project's own plugin: it publishes --devices devices
// for its node and, on prepare, writes one CDI spec file per claim.
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
	// failClaims makes prepare fail for claims with this name, to test
	// error propagation.
	failClaim string
}

func main() {
	var (
		kubeconfig, nodeName, driver, rootDir, cdiDir, failClaim string
		devices                                                  int
	)
	klog.InitFlags(nil)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig")
	flag.StringVar(&nodeName, "node-name", "", "node name")
	flag.StringVar(&driver, "driver", "neuron.aws.com", "driver name")
	flag.StringVar(&rootDir, "root-dir", "", "kubelet root dir (plugins_registry/ and plugins/ below it)")
	flag.StringVar(&cdiDir, "cdi-dir", "", "where to write CDI spec files")
	flag.StringVar(&failClaim, "fail-claim", "", "fail NodePrepareResources for claims with this name")
	flag.IntVar(&devices, "devices", 4, "number of devices to publish")
	flag.Parse()
	if err := run(kubeconfig, nodeName, driver, rootDir, cdiDir, failClaim, devices); err != nil {
		klog.ErrorS(err, "drastub failed")
		klog.Flush()
		os.Exit(1)
	}
}

func run(kubeconfig, nodeName, driver, rootDir, cdiDir, failClaim string, devices int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dataDir := filepath.Join(rootDir, "plugins", driver)
	regDir := filepath.Join(rootDir, "plugins_registry")
	for _, d := range []string{dataDir, regDir, cdiDir} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	s := &stub{driver: driver, cdiDir: cdiDir, failClaim: failClaim}
	helper, err := kubeletplugin.Start(ctx, s,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(nodeName),
		kubeletplugin.NodeUID(node.UID),
		kubeletplugin.DriverName(driver),
		kubeletplugin.RegistrarDirectoryPath(regDir),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()

	devs := make([]resourceapi.Device, 0, devices)
	for i := range devices {
		devs = append(devs, resourceapi.Device{
			Name:       fmt.Sprintf("neuron-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(int64(i))}},
		})
	}
	if err := helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{nodeName: {Slices: []resourceslice.Slice{{Devices: devs}}}},
	}); err != nil {
		return err
	}
	klog.InfoS("drastub running", "driver", driver, "node", nodeName, "devices", devices)
	<-ctx.Done()
	return nil
}

func (s *stub) specPath(uid types.UID) string {
	return filepath.Join(s.cdiDir, "drastub-"+string(uid)+".json")
}

func (s *stub) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		klog.FromContext(ctx).Info("Prepare", "claim", klog.KObj(claim), "uid", claim.UID)
		if claim.Name == s.failClaim {
			out[claim.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("drastub refuses claim %s", claim.Name)}
			continue
		}
		spec := cdispec.Spec{Version: "0.6.0", Kind: cdiKind}
		var result kubeletplugin.PrepareResult
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != s.driver {
				continue
			}
			name := string(claim.UID) + "-" + r.Device
			index := strings.TrimPrefix(r.Device, "neuron-")
			spec.Devices = append(spec.Devices, cdispec.Device{
				Name: name,
				ContainerEdits: cdispec.ContainerEdits{
					Env: []string{"DRASTUB_DEVICE_" + index + "=" + r.Device},
					// Fully specified so that no host device has to exist.
					DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/drastub" + index, Type: "c", Major: 240, Minor: 0}},
				},
			})
			result.Devices = append(result.Devices, kubeletplugin.Device{
				Requests:     []string{r.Request},
				PoolName:     r.Pool,
				DeviceName:   r.Device,
				CDIDeviceIDs: []string{cdiKind + "=" + name},
			})
		}
		data, err := json.Marshal(spec)
		if err == nil {
			err = os.WriteFile(s.specPath(claim.UID), data, 0o640)
		}
		if err != nil {
			result = kubeletplugin.PrepareResult{Err: err}
		}
		out[claim.UID] = result
	}
	return out, nil
}

func (s *stub) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		klog.FromContext(ctx).Info("Unprepare", "claim", claim.NamespacedName, "uid", claim.UID)
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
