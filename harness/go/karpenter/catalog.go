package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"sort"
	"unique"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"sigs.k8s.io/karpenter/pkg/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	"sigs.k8s.io/karpenter/pkg/utils/env"
)

// catalogOptions adds --neuron-catalog-path (NEURON_CATALOG_PATH) to the operator's flags.
type catalogOptions struct {
	Path string
}

type catalogKey struct{}

func init() {
	options.Injectables = append(options.Injectables, &catalogOptions{})
}

func (o *catalogOptions) AddFlags(fs *options.FlagSet) {
	fs.StringVar(&o.Path, "neuron-catalog-path", env.WithDefaultString("NEURON_CATALOG_PATH", ""),
		"Path to the Neuron DRA driver's catalog: `neuron-dra templates` output, keyed by instance type")
}

func (o *catalogOptions) Parse(fs *options.FlagSet, args ...string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		return fmt.Errorf("parsing flags, %w", err)
	}
	return nil
}

func (o *catalogOptions) ToContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, catalogKey{}, o)
}

// CatalogPath is the --neuron-catalog-path the operator was started with.
func CatalogPath(ctx context.Context) string {
	if o, ok := ctx.Value(catalogKey{}).(*catalogOptions); ok {
		return o.Path
	}
	return ""
}

// The catalog's JSON: DynamicResources per instance type, with the devices and counter
// sets of resource.k8s.io/v1 and plain strings where Karpenter interns them.
type catalogDeviceID struct {
	Driver string `json:"driver"`
	Pool   string `json:"pool"`
	Device string `json:"device"`
}

type catalogBinding struct {
	Devices   []catalogDeviceID        `json:"devices"`
	Attribute resourcev1.QualifiedName `json:"attribute"`
}

type catalogSlice struct {
	Driver string `json:"driver"`
	Pool   struct {
		Name string `json:"name"`
	} `json:"pool"`
	Devices        []resourcev1.Device     `json:"devices"`
	SharedCounters []resourcev1.CounterSet `json:"sharedCounters"`
}

type catalogEntry struct {
	ResourceSliceTemplates []catalogSlice   `json:"resourceSliceTemplates"`
	AttributeBindings      []catalogBinding `json:"attributeBindings"`
}

// withCatalog sets the DynamicResources of every instance type the catalog at path names.
// Every catalog type must be an instance type of the provider; a type the catalog lacks
// keeps no devices.
func withCatalog(instanceTypes []*cloudprovider.InstanceType, path string) error {
	if path == "" {
		return errors.New("--neuron-catalog-path (NEURON_CATALOG_PATH) is required")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the catalog: %w", err)
	}
	var catalog map[string]catalogEntry
	if err := json.Unmarshal(raw, &catalog); err != nil {
		return fmt.Errorf("parsing the catalog %s: %w", path, err)
	}
	byName := map[string]*cloudprovider.InstanceType{}
	for _, it := range instanceTypes {
		byName[it.Name] = it
	}
	var missing []string
	for name, entry := range catalog {
		it, ok := byName[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		it.DynamicResources = dynamicResources(entry)
		if it.Capacity == nil {
			it.Capacity = corev1.ResourceList{}
		}
		maps.Copy(it.Capacity, devicePluginCapacity(entry))
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("catalog instance types with no entry in the instance types file: %v", missing)
	}
	return nil
}

// The Neuron device plugin's resources, which the AWS provider gives every inf and trn
// instance type from DescribeInstanceTypes' NeuronInfo (karpenter-provider-aws,
// pkg/providers/instancetype/types.go, computeCapacity: aws.amazon.com/neuron is the
// number of Neuron devices, aws.amazon.com/neuroncore that times the physical
// NeuronCores of a device).
const (
	resourceNeuron     corev1.ResourceName = "aws.amazon.com/neuron"
	resourceNeuronCore corev1.ResourceName = "aws.amazon.com/neuroncore"
)

// devicePluginCapacity is what the AWS provider would give the catalog entry's type:
// its whole Neuron devices (resourceType neuron_device; never an UltraServer's node
// device) and their physical cores (each device's "cores" capacity).
func devicePluginCapacity(entry catalogEntry) corev1.ResourceList {
	var devices, cores int64
	for _, s := range entry.ResourceSliceTemplates {
		for _, d := range s.Devices {
			kind := d.Attributes["resourceType"].StringValue
			if kind == nil || *kind != "neuron_device" {
				continue
			}
			devices++
			if c, ok := d.Capacity["cores"]; ok {
				cores += c.Value.Value()
			}
		}
	}
	return corev1.ResourceList{
		resourceNeuron:     *resource.NewQuantity(devices, resource.DecimalSI),
		resourceNeuronCore: *resource.NewQuantity(cores, resource.DecimalSI),
	}
}

func dynamicResources(entry catalogEntry) cloudprovider.DynamicResources {
	var out cloudprovider.DynamicResources
	for _, s := range entry.ResourceSliceTemplates {
		template := &cloudprovider.ResourceSliceTemplate{
			Driver:         unique.Make(s.Driver),
			Pool:           cloudprovider.ResourcePool{Name: unique.Make(s.Pool.Name)},
			SharedCounters: s.SharedCounters,
		}
		for _, d := range s.Devices {
			template.Devices = append(template.Devices, cloudprovider.Device{
				Name:                     unique.Make(d.Name),
				Attributes:               d.Attributes,
				Capacity:                 d.Capacity,
				AllowMultipleAllocations: d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations,
				ConsumesCounters:         d.ConsumesCounters,
			})
		}
		out.ResourceSliceTemplates = append(out.ResourceSliceTemplates, template)
	}
	for _, b := range entry.AttributeBindings {
		binding := &cloudprovider.AttributeBinding{Attribute: b.Attribute}
		for _, d := range b.Devices {
			binding.Devices = append(binding.Devices, cloudprovider.DeviceID{
				Driver: unique.Make(d.Driver),
				Pool:   unique.Make(d.Pool),
				Device: unique.Make(d.Device),
			})
		}
		out.AttributeBindings = append(out.AttributeBindings, binding)
	}
	return out
}
