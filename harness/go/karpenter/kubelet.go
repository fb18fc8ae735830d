package main

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kubeletView is the client the KWOK provider creates its Nodes with. KWOK creates a
// NodeClaim's Node itself, with the instance type's allocatable; on EC2 the node's
// kubelet registers it, and with no Neuron device plugin running its capacity and
// allocatable have no aws.amazon.com/neuron or aws.amazon.com/neuroncore. So a Node is
// created as that kubelet would register it: without them. The NodeClaim keeps them,
// as the AWS provider's does.
type kubeletView struct {
	client.Client
}

func (k kubeletView) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return k.Client.Create(ctx, obj, opts...)
	}
	registered := node.DeepCopy()
	for _, name := range []corev1.ResourceName{resourceNeuron, resourceNeuronCore} {
		delete(registered.Status.Capacity, name)
		delete(registered.Status.Allocatable, name)
	}
	// The provider reads `node` concurrently (its NodeClaim is made from it) and never
	// after this call: the copy, not `node`, takes the server's answer.
	return k.Client.Create(ctx, registered, opts...)
}
