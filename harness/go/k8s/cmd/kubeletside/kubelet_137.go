//go:build k8s1.37

package main

import (
	"context"
	"time"

	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// The kubelet from 1.37: its registration handler takes the plugin
// manager's context.

type handlerAdapter struct{ inner plugincache.PluginHandler }

func adaptHandler(h plugincache.PluginHandler) pluginHandler { return handlerAdapter{h} }

func (a handlerAdapter) validate(ctx context.Context, name, endpoint string, versions []string) error {
	return a.inner.ValidatePlugin(ctx, name, endpoint, versions)
}

func (a handlerAdapter) register(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	return a.inner.RegisterPlugin(ctx, name, endpoint, versions, timeout)
}

func (a handlerAdapter) deregister(ctx context.Context, name, endpoint string) {
	a.inner.DeRegisterPlugin(ctx, name, endpoint)
}

type handlerOf struct{ h pluginHandler }

func pluginHandlerOf(_ context.Context, h pluginHandler) plugincache.PluginHandler {
	return handlerOf{h}
}

func (o handlerOf) ValidatePlugin(ctx context.Context, name, endpoint string, versions []string) error {
	return o.h.validate(ctx, name, endpoint, versions)
}

func (o handlerOf) RegisterPlugin(ctx context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	return o.h.register(ctx, name, endpoint, versions, timeout)
}

func (o handlerOf) DeRegisterPlugin(ctx context.Context, name, endpoint string) {
	o.h.deregister(ctx, name, endpoint)
}
