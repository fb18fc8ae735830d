package main

import (
	"context"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cri-client/pkg/util"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	podresourcesv1alpha1 "k8s.io/kubelet/pkg/apis/podresources/v1alpha1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	kubeletutil "k8s.io/kubernetes/pkg/kubelet/util"
)

// podResourcesDirName is the kubelet's DefaultKubeletPodResourcesDirName,
// whose package moved in 1.35.
const podResourcesDirName = "pod-resources"

// servePodResources serves the kubelet's PodResources API where the kubelet
// does, <root dir>/pod-resources/kubelet.sock, until ctx ends: the kubelet's
// own v1 and v1alpha1 servers, rate limited like the kubelet's, over this
// program's pods and DRA manager. No device plugin, CPU manager or memory
// manager runs here, so devices, CPUs and memory are always empty. Returns
// the socket's path.
//
// The v1 server reads the kubelet's feature gates itself, as in the kubelet:
// KubeletPodResourcesDynamicResources fills dynamic_resources and
// KubeletPodResourcesGet enables Get (both off by default before 1.34), and
// KubeletPodResourcesListUseActivePods (from 1.34, on) makes List list the
// active pods rather than all.
func servePodResources(ctx context.Context, rootDir string, k *kubeletSide) (string, error) {
	logger := klog.FromContext(ctx)
	dir := filepath.Join(rootDir, podResourcesDirName)
	endpoint, err := kubeletutil.LocalEndpoint(dir, podresources.Socket)
	if err != nil {
		return "", err
	}
	providers := podresources.PodResourcesProviders{
		Pods:             podsProvider{k},
		Devices:          noResources{},
		Cpus:             noResources{},
		Memory:           noResources{},
		DynamicResources: dynamicResources{k.draManager},
	}
	limiter, err := podResourcesRateLimiter(ctx)
	if err != nil {
		return "", err
	}
	server := grpc.NewServer(limiter)
	podresourcesv1alpha1.RegisterPodResourcesListerServer(server, podresources.NewV1alpha1PodResourcesServer(providers))
	v1Server, err := newV1PodResourcesServer(ctx, providers)
	if err != nil {
		return "", err
	}
	podresourcesv1.RegisterPodResourcesListerServer(server, v1Server)
	// The kubelet's listener: it creates the directory, replaces a stale
	// socket file, and the socket appears under its name only once it
	// accepts connections.
	l, err := util.CreateListener(endpoint)
	if err != nil {
		return "", fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	go func() {
		<-ctx.Done()
		server.Stop()
	}()
	go func() {
		if err := server.Serve(l); err != nil {
			logger.Error(err, "PodResources server")
		}
	}()
	logger.Info("Serving the podresources API", "endpoint", endpoint)
	return filepath.Join(dir, podresources.Socket+".sock"), nil
}

// podsProvider gives the PodResources server the pods the kubelet knows:
// all pods bound to this node, and the active ones.
type podsProvider struct{ k *kubeletSide }

func (p podsProvider) GetActivePods() []*v1.Pod { return p.k.activePods() }

func (p podsProvider) GetPods() []*v1.Pod {
	pods, err := p.k.podLister.List(labels.Everything())
	if err != nil {
		return nil
	}
	return pods
}

// GetPodByName finds active pods only, as the kubelet's provider does from
// 1.35 (before, its pod manager also returned terminal pods).
func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	pod, err := p.k.podLister.Pods(namespace).Get(name)
	if err != nil || isTerminal(pod) {
		return nil, false
	}
	return pod, true
}

// noResources provides no devices, CPUs or memory. Its methods, whose
// signatures differ between releases, are in podresources_*.go.
type noResources struct{}

// dynamicResources is the kubelet container manager's GetDynamicResources
// over this program's DRA manager. Its method, whose signature differs
// between releases, is in podresources_*.go.
type dynamicResources struct{ m draManager }

// get is the body of the kubelet's GetDynamicResources
// (pkg/kubelet/cm/container_manager_linux.go), the same in every release
// but for the fields of ClaimResource (claimResource).
//
// The kubelet returns nothing while its DynamicResourceAllocation gate is
// off. It then runs no DRA manager either, while this program always runs
// one, like a kubelet with the gate on; so that check is left out. It only
// differs on 1.33, where the gate is off by default.
func (d dynamicResources) get(logger klog.Logger, pod *v1.Pod, container *v1.Container) []*podresourcesv1.DynamicResource {
	var containerDynamicResources []*podresourcesv1.DynamicResource
	containerClaimInfos, err := d.m.GetContainerClaimInfos(pod, container)
	if err != nil {
		logger.Error(err, "Unable to get container claim info state")
		return []*podresourcesv1.DynamicResource{}
	}
	for _, containerClaimInfo := range containerClaimInfos {
		var claimResources []*podresourcesv1.ClaimResource
		for driverName, driverState := range containerClaimInfo.DriverState {
			// Kept from the kubelet: cdiDevices is not reset per device, so
			// each device of a driver also lists the CDI devices of the
			// devices before it. Clients of a real kubelet see the same.
			var cdiDevices []*podresourcesv1.CDIDevice
			for _, device := range driverState.Devices {
				for _, cdiDeviceID := range device.CDIDeviceIDs {
					cdiDevices = append(cdiDevices, &podresourcesv1.CDIDevice{Name: cdiDeviceID})
				}
				claimResources = append(claimResources, claimResource(driverName, device, cdiDevices))
			}
		}
		containerDynamicResources = append(containerDynamicResources, &podresourcesv1.DynamicResource{
			ClaimName:      containerClaimInfo.ClaimName,
			ClaimNamespace: containerClaimInfo.Namespace,
			ClaimResources: claimResources,
		})
	}
	return containerDynamicResources
}
