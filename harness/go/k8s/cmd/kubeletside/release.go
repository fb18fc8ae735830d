package main

// What this program uses of the kubelet, in a shape every supported release
// fits. Signatures that changed between releases are bridged here, at run
// time where only a signature changed and by build tags (dramanager_*.go,
// kubelet_*.go, podresources_*.go, claimresource_*.go, ...) where a symbol
// only exists in some releases or a type's methods changed. build.py passes
// the tags k8s1.33 ... k8s1.Y for release 1.Y, cumulative like Go's own
// release tags.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	apisgrpc "k8s.io/kubernetes/pkg/kubelet/apis/grpc"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/dra"
	"k8s.io/kubernetes/pkg/kubelet/cm/resourceupdates"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/config"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// draManager is the kubelet's DRA manager: dra.ManagerImpl up to 1.33,
// dra.Manager from 1.34 (see newDRAManager).
type draManager interface {
	GetWatcherHandler() plugincache.PluginHandler
	Start(ctx context.Context, activePods dra.ActivePodsFunc, getNode dra.GetNodeFunc, sourcesReady kubeletconfig.SourcesReady) error
	PrepareResources(ctx context.Context, pod *v1.Pod) error
	UnprepareResources(ctx context.Context, pod *v1.Pod) error
	GetResources(pod *v1.Pod, container *v1.Container) (*dra.ContainerInfo, error)
	PodMightNeedToUnprepareResources(uid types.UID) bool
	GetContainerClaimInfos(pod *v1.Pod, container *v1.Container) ([]*dra.ClaimInfo, error)
}

// pluginHandler is the kubelet's plugin registration handler as 1.37 has it
// (with a context); adaptHandler and pluginHandlerOf convert both ways.
type pluginHandler interface {
	validate(ctx context.Context, name, endpoint string, versions []string) error
	register(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error
	deregister(ctx context.Context, name, endpoint string)
}

// runPluginManager runs the plugin manager until ctx ends; Run takes a
// context from 1.35.
func runPluginManager(ctx context.Context, pm pluginmanager.PluginManager, sourcesReady kubeletconfig.SourcesReady) {
	switch run := any(pm).(type) {
	case interface {
		Run(context.Context, kubeletconfig.SourcesReady, <-chan struct{})
	}:
		run.Run(ctx, sourcesReady, ctx.Done())
	case interface {
		Run(kubeletconfig.SourcesReady, <-chan struct{})
	}:
		run.Run(sourcesReady, ctx.Done())
	default:
		klog.FromContext(ctx).Error(nil, "Plugin manager of an unknown shape: plugins never register")
	}
}

// updateHealthStatus fills allocatedResourcesStatus as the kubelet does: the
// DRA manager does it from 1.34 and takes a logger from 1.37. Before 1.34 the
// kubelet reports no DRA device health.
func updateHealthStatus(ctx context.Context, m draManager, pod *v1.Pod, status *v1.PodStatus) {
	switch update := any(m).(type) {
	case interface {
		UpdateAllocatedResourcesStatus(klog.Logger, *v1.Pod, *v1.PodStatus)
	}:
		update.UpdateAllocatedResourcesStatus(klog.FromContext(ctx), pod, status)
	case interface {
		UpdateAllocatedResourcesStatus(*v1.Pod, *v1.PodStatus)
	}:
		update.UpdateAllocatedResourcesStatus(pod, status)
	}
}

// watchHealth calls podsChanged with the pods whose devices changed health,
// until ctx ends. Returns at once where the DRA manager streams no health
// (before 1.34).
func watchHealth(ctx context.Context, m draManager, podsChanged func(uids []string)) {
	source, ok := any(m).(interface {
		Updates() <-chan resourceupdates.Update
	})
	if !ok {
		return
	}
	updates := source.Updates()
	for {
		select {
		case <-ctx.Done():
			return
		case u := <-updates:
			podsChanged(u.PodUIDs)
		}
	}
}

// newV1PodResourcesServer is the kubelet's PodResources v1 server, which
// takes a context from 1.34.
func newV1PodResourcesServer(ctx context.Context, providers podresources.PodResourcesProviders) (podresourcesv1.PodResourcesListerServer, error) {
	switch newServer := any(podresources.NewV1PodResourcesServer).(type) {
	case func(context.Context, podresources.PodResourcesProviders) podresourcesv1.PodResourcesListerServer:
		return newServer(ctx, providers), nil
	case func(podresources.PodResourcesProviders) podresourcesv1.PodResourcesListerServer:
		return newServer(providers), nil
	default:
		return nil, fmt.Errorf("NewV1PodResourcesServer of an unknown shape: %T", newServer)
	}
}

// podResourcesRateLimiter limits PodResources requests as the kubelet does;
// WithRateLimiter takes a context from 1.34.
func podResourcesRateLimiter(ctx context.Context) (grpc.ServerOption, error) {
	const name = "podresources"
	qps, burst := int32(podresources.DefaultQPS), int32(podresources.DefaultBurstTokens)
	switch limiter := any(apisgrpc.WithRateLimiter).(type) {
	case func(context.Context, string, int32, int32) grpc.ServerOption:
		return limiter(ctx, name, qps, burst), nil
	case func(string, int32, int32) grpc.ServerOption:
		return limiter(name, qps, burst), nil
	default:
		return nil, fmt.Errorf("WithRateLimiter of an unknown shape: %T", limiter)
	}
}
