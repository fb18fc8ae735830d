// Runs Karpenter's operator with the KWOK cloud provider, its instance types
// (--instance-types-file-path) given the DynamicResources of the Neuron DRA driver's
// catalog (--neuron-catalog-path, the output of `neuron-dra templates`), so that its
// scheduling simulation places DRA claims on instance types that do not run yet.
package main

import (
	"github.com/samber/lo"
	"sigs.k8s.io/controller-runtime/pkg/log"

	kwok "sigs.k8s.io/karpenter/kwok/cloudprovider"
	"sigs.k8s.io/karpenter/pkg/cloudprovider/overlay"
	"sigs.k8s.io/karpenter/pkg/controllers"
	"sigs.k8s.io/karpenter/pkg/controllers/node/health"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/operator"
)

func main() {
	ctx, op := operator.NewOperator()
	instanceTypes := lo.Must(kwok.ConstructInstanceTypes(ctx))
	if err := withCatalog(instanceTypes, CatalogPath(ctx)); err != nil {
		log.FromContext(ctx).Error(err, "loading the Neuron catalog")
		panic(err)
	}
	undecorated := kwok.NewCloudProvider(ctx, kubeletView{op.GetClient()}, instanceTypes)
	cloudProvider := overlay.Decorate(undecorated, op.GetClient(), op.InstanceTypeStore)
	repairPolicies := lo.Must(health.NewRepairPolicyMatcher(ctx, cloudProvider))
	clusterState := state.NewCluster(op.Clock, op.GetClient(), cloudProvider, state.WithRepairPolicyMatcher(repairPolicies))
	op.WithControllers(ctx, controllers.NewControllers(
		ctx,
		op.Manager,
		op.Clock,
		op.GetClient(),
		op.EventRecorder,
		cloudProvider,
		undecorated,
		clusterState,
		op.InstanceTypeStore,
		op.PredictionStore,
	)...).Start(ctx)
}
