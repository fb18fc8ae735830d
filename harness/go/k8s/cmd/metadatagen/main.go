// Command metadatagen encodes a device metadata file and its CDI spec with the
// same packages and settings as the kubelet-plugin helper's metadata writer
// (k8s.io/dynamic-resource-allocation kubeletplugin, EnableDeviceMetadata), so
// tests can compare the driver's bytes with them.
//
// Input on stdin: {"namespace","name","uid","podClaimName","request","hostPath",
// "containerPath","devices":[{"driver","pool","name","attributes"}]}.
// Output: the metadata file to argv[1], the CDI spec to argv[2].
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/api/metadata"
	"k8s.io/dynamic-resource-allocation/api/metadata/install"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

type input struct {
	Namespace     string            `json:"namespace"`
	Name          string            `json:"name"`
	UID           string            `json:"uid"`
	PodClaimName  *string           `json:"podClaimName"`
	Request       string            `json:"request"`
	HostPath      string            `json:"hostPath"`
	ContainerPath string            `json:"containerPath"`
	Devices       []metadata.Device `json:"devices"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	var in input
	if err := json.NewDecoder(os.Stdin).Decode(&in); err != nil {
		return err
	}
	for i := range in.Devices {
		attrs := in.Devices[i].Attributes
		in.Devices[i].Attributes = make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(attrs))
		for k, v := range attrs {
			in.Devices[i].Attributes[k] = v
		}
		if len(attrs) == 0 {
			in.Devices[i].Attributes = nil
		}
	}
	scheme := install.NewScheme()
	codecs := runtimeserializer.NewCodecFactory(scheme)
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	if !ok {
		return fmt.Errorf("no JSON serializer")
	}
	enc := codecs.EncoderForVersion(info.PrettySerializer, metadatav1beta1.SchemeGroupVersion)
	dm := &metadata.DeviceMetadata{
		ObjectMeta:   metav1.ObjectMeta{Name: in.Name, Namespace: in.Namespace, UID: types.UID(in.UID), Generation: 1},
		PodClaimName: in.PodClaimName,
		Requests:     []metadata.DeviceMetadataRequest{{Name: in.Request, Devices: in.Devices}},
	}
	data, err := runtime.Encode(enc, dm)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	buf.Write(data)
	buf.WriteByte('\n')
	if err := os.WriteFile(os.Args[1], buf.Bytes(), 0o644); err != nil {
		return err
	}
	spec := &cdispec.Spec{
		Kind: in.Devices[0].Driver + "/metadata",
		Devices: []cdispec.Device{{
			Name: in.UID + "_" + in.Request,
			ContainerEdits: cdispec.ContainerEdits{Mounts: []*cdispec.Mount{{
				HostPath: in.HostPath, ContainerPath: in.ContainerPath, Options: []string{"ro", "bind"},
			}}},
		}},
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return err
	}
	spec.Version = v
	cdi, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(os.Args[2], cdi, 0o644)
}
