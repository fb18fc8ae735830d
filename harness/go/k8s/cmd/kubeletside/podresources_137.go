//go:build k8s1.37

package main

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// The PodResources providers from 1.37: they take a logger, and CPUs and
// memory are also asked for per pod.

func (noResources) UpdateAllocatedDevices(klog.Logger) {}

func (noResources) GetDevices(_, _ string) []*podresourcesv1.ContainerDevices { return nil }

func (noResources) GetAllocatableDevices(klog.Logger) []*podresourcesv1.ContainerDevices {
	return nil
}

func (noResources) GetCPUs(*v1.Pod, *v1.Container) []int64 { return nil }

func (noResources) GetPodCPUs(string) []int64 { return nil }

func (noResources) GetAllocatableCPUs() []int64 { return nil }

func (noResources) GetMemory(klog.Logger, *v1.Pod, *v1.Container) []*podresourcesv1.ContainerMemory {
	return nil
}

func (noResources) GetPodMemory(klog.Logger, string) []*podresourcesv1.ContainerMemory {
	return nil
}

func (noResources) GetAllocatableMemory(klog.Logger) []*podresourcesv1.ContainerMemory {
	return nil
}

func (d dynamicResources) GetDynamicResources(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesv1.DynamicResource {
	return d.get(logger, pod, container)
}
