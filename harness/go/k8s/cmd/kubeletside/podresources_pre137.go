//go:build !k8s1.37

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// The PodResources providers up to 1.36: no logger, and CPUs and memory are
// asked for by pod UID and container name.

func (noResources) UpdateAllocatedDevices() {}

func (noResources) GetDevices(_, _ string) []*podresourcesv1.ContainerDevices { return nil }

func (noResources) GetAllocatableDevices() []*podresourcesv1.ContainerDevices { return nil }

func (noResources) GetCPUs(_, _ string) []int64 { return nil }

func (noResources) GetAllocatableCPUs() []int64 { return nil }

func (noResources) GetMemory(_, _ string) []*podresourcesv1.ContainerMemory { return nil }

func (noResources) GetAllocatableMemory() []*podresourcesv1.ContainerMemory { return nil }

// GetDynamicResources logs as the kubelet's did then: through the global
// logger (klog.TODO in 1.36).
func (d dynamicResources) GetDynamicResources(pod *v1.Pod, container *v1.Container) []*podresourcesv1.DynamicResource {
	return d.get(klog.Background(), pod, container)
}
