//go:build !k8s1.37

package main

import (
	"context"
	"time"

	plugincache "k8s.io/kubernetes/pkg/kubelet/pluginmanager/cache"
)

// The kubelet up to 1.36: its registration handler takes no context; ctx is
// what the plugin manager would have passed from 1.37 on.

type handlerAdapter struct{ inner plugincache.PluginHandler }

func adaptHandler(h plugincache.PluginHandler) pluginHandler { return handlerAdapter{h} }

func (a handlerAdapter) validate(_ context.Context, name, endpoint string, versions []string) error {
	return a.inner.ValidatePlugin(name, endpoint, versions)
}

func (a handlerAdapter) register(_ context.Context, name, endpoint string, versions []string, timeout *time.Duration) error {
	return a.inner.RegisterPlugin(name, endpoint, versions, timeout)
}

func (a handlerAdapter) deregister(_ context.Context, name, endpoint string) {
	a.inner.DeRegisterPlugin(name, endpoint)
}

type handlerOf struct {
	ctx context.Context
	h   pluginHandler
}

func pluginHandlerOf(ctx context.Context, h pluginHandler) plugincache.PluginHandler {
	return handlerOf{ctx, h}
}

func (o handlerOf) ValidatePlugin(name, endpoint string, versions []string) error {
	return o.h.validate(o.ctx, name, endpoint, versions)
}

func (o handlerOf) RegisterPlugin(name, endpoint string, versions []string, timeout *time.Duration) error {
	return o.h.register(o.ctx, name, endpoint, versions, timeout)
}

func (o handlerOf) DeRegisterPlugin(name, endpoint string) {
	o.h.deregister(o.ctx, name, endpoint)
}
