//go:build k8s1.37

// Command metadatagen prepares one ResourceClaim through the kubelet-plugin
// helper of k8s.io/dynamic-resource-allocation with EnableDeviceMetadata
// (metadata.resource.k8s.io/v1beta1), so that the helper's own metadata
// writer writes the device metadata file and its CDI spec. The tests compare
// them, byte for byte, with what the project's plugin wrote for the same claim.
//
// The plugin it starts reports each allocation result of --driver as a device
// whose metadata attributes are those the node's ResourceSlices publish for
// it, read from the API server. It then calls the helper's
// NodePrepareResources over the DRA socket, as the kubelet does, prints the
// answer as JSON on stdout, and stops: no registration, no slices published.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

type options struct {
	kubeconfig, nodeName, driver, pluginDir, cdiDir string
	namespace, name, uid                            string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server")
	flag.StringVar(&o.nodeName, "node-name", "", "the node whose slices publish the devices")
	flag.StringVar(&o.driver, "driver", "neuron.aws.com", "driver name")
	flag.StringVar(&o.pluginDir, "plugin-dir", "", "the helper's plugin data directory")
	flag.StringVar(&o.cdiDir, "cdi-dir", "", "where the helper writes CDI specs")
	flag.StringVar(&o.namespace, "namespace", "", "the claim's namespace")
	flag.StringVar(&o.name, "name", "", "the claim's name")
	flag.StringVar(&o.uid, "uid", "", "the claim's UID")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "metadatagen:", err)
		os.Exit(1)
	}
}

type plugin struct {
	driver     string
	attributes map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
}

func (p *plugin) PrepareResourceClaims(_ context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var devices []kubeletplugin.Device
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != p.driver {
				continue
			}
			attrs := make(map[string]resourceapi.DeviceAttribute)
			for k, v := range p.attributes[r.Device] {
				attrs[string(k)] = v
			}
			devices = append(devices, kubeletplugin.Device{
				Requests:   []string{r.Request},
				PoolName:   r.Pool,
				DeviceName: r.Device,
				Metadata:   &kubeletplugin.DeviceMetadata{Attributes: attrs},
			})
		}
		out[claim.UID] = kubeletplugin.PrepareResult{Devices: devices}
	}
	return out, nil
}

func (p *plugin) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = nil
	}
	return out, nil
}

func (p *plugin) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintln(os.Stderr, "metadatagen:", msg, err)
}

func (p *plugin) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// published reads the attributes of every device the node's slices of the driver publish.
func published(ctx context.Context, client kubernetes.Interface, node, driver string) (map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, error) {
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + driver,
	})
	if err != nil {
		return nil, err
	}
	found := map[string]map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			found[d.Name] = d.Attributes
		}
	}
	return found, nil
}

func run(o options) error {
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	attributes, err := published(ctx, client, o.nodeName, o.driver)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.pluginDir, 0o750); err != nil {
		return err
	}
	helper, err := kubeletplugin.Start(ctx, &plugin{driver: o.driver, attributes: attributes},
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(o.nodeName),
		kubeletplugin.DriverName(o.driver),
		kubeletplugin.RegistrationService(false),
		kubeletplugin.HealthService(false),
		kubeletplugin.PluginDataDirectoryPath(o.pluginDir),
		kubeletplugin.CDIDirectory(o.cdiDir),
		kubeletplugin.EnableDeviceMetadata(true, []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()
	conn, err := grpc.NewClient("unix://"+filepath.Join(o.pluginDir, "dra.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	answer, err := drapb.NewDRAPluginClient(conn).NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: o.namespace, Name: o.name, Uid: o.uid}},
	})
	if err != nil {
		return err
	}
	got := answer.Claims[o.uid]
	if got == nil || got.Error != "" {
		return fmt.Errorf("prepare failed: %v", got)
	}
	return json.NewEncoder(os.Stdout).Encode(got)
}
