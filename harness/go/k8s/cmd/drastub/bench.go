package main

// Benchmark mode: per claim, the work the Kubernetes project's example DRA
// driver (sigs.k8s.io/dra-example-driver, cmd/dra-example-kubeletplugin)
// does, so that the benchmarks can set a plugin on the upstream helper beside
// the project's own:
//
//   - prepare: read the checkpoint; if the claim is in it, answer from the
//     allocation again; else write the claim's CDI spec with the CDI
//     library's Cache.WriteSpec (YAML, temp file + rename, no fsync) and the
//     checkpoint (temp file, fsync, rename; no directory fsync);
//   - unprepare: read the checkpoint, remove the spec with Cache.RemoveSpec,
//     write the checkpoint without the claim.
//
// The Cache watches the spec directory and rescans it on every change, as
// the example driver's does. The helper does the claim GET before either.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const commonDevice = "common"

type benchState struct {
	sync.Mutex
	cache       *cdiapi.Cache
	checkpoint  string
	allocatable map[string]bool
	vendor      string
	class       string
}

// checkpointFile is the checkpoint's on-disk form: a versioned object with
// the UIDs of the prepared claims.
type checkpointFile struct {
	APIVersion     string          `json:"apiVersion"`
	Kind           string          `json:"kind"`
	PreparedClaims []preparedClaim `json:"preparedClaims,omitempty"`
}

type preparedClaim struct {
	UID types.UID `json:"uid"`
}

func newBenchState(cdiDir, checkpoint, nodeName, driver string, devices []resourceapi.Device) (*benchState, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(cdiDir))
	if err != nil {
		return nil, err
	}
	vendor, class := cdiparser.ParseQualifier(cdiKind)
	b := &benchState{cache: cache, checkpoint: checkpoint, allocatable: map[string]bool{}, vendor: vendor, class: class}
	for _, d := range devices {
		b.allocatable[d.Name] = true
	}
	// The edits every container of a claim gets, in a spec of their own.
	common := &cdispec.Spec{Kind: cdiKind, Devices: []cdispec.Device{{
		Name: commonDevice,
		ContainerEdits: cdispec.ContainerEdits{Env: []string{
			"KUBERNETES_NODE_NAME=" + nodeName, "DRA_RESOURCE_DRIVER_NAME=" + driver,
		}},
	}}}
	if err := b.writeSpec(common, cdiapi.GenerateTransientSpecName(vendor, class, commonDevice)); err != nil {
		return nil, fmt.Errorf("common CDI spec: %w", err)
	}
	return b, nil
}

func (b *benchState) writeSpec(spec *cdispec.Spec, name string) error {
	version, err := cdiapi.MinimumRequiredVersion(spec)
	if err != nil {
		return err
	}
	spec.Version = version
	return b.cache.WriteSpec(spec, name)
}

func (b *benchState) specName(uid types.UID) string {
	return cdiapi.GenerateTransientSpecName(b.vendor, b.class, string(uid))
}

func (b *benchState) prepare(s *stub, claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	b.Lock()
	defer b.Unlock()
	fail := func(err error) kubeletplugin.PrepareResult {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("prepare claim %s: %w", claim.UID, err)}
	}
	cp, err := b.readCheckpoint()
	if err != nil {
		return fail(err)
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver == s.driver && !b.allocatable[r.Device] {
			return fail(fmt.Errorf("device %s is not allocatable", r.Device))
		}
	}
	specDevices, prepared := s.claimDevices(claim, cdiKind+"="+commonDevice)
	if slices.ContainsFunc(cp.PreparedClaims, func(c preparedClaim) bool { return c.UID == claim.UID }) {
		return kubeletplugin.PrepareResult{Devices: prepared}
	}
	for i := range specDevices {
		device := strings.TrimPrefix(specDevices[i].Name, string(claim.UID)+"-")
		key := strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(device))
		specDevices[i].ContainerEdits.Env = append(specDevices[i].ContainerEdits.Env,
			strings.ToUpper(b.class)+"_DEVICE_"+key+"_RESOURCE_CLAIM="+string(claim.UID), "DRA_ADMIN_ACCESS=false")
	}
	cp.PreparedClaims = append(cp.PreparedClaims, preparedClaim{UID: claim.UID})
	if err := b.writeSpec(&cdispec.Spec{Kind: cdiKind, Devices: specDevices}, b.specName(claim.UID)); err != nil {
		return fail(err)
	}
	if err := b.writeCheckpoint(cp); err != nil {
		return fail(err)
	}
	return kubeletplugin.PrepareResult{Devices: prepared}
}

func (b *benchState) unprepare(uid types.UID) error {
	b.Lock()
	defer b.Unlock()
	cp, err := b.readCheckpoint()
	if err != nil {
		// Unreadable: start again from an empty one.
		cp = &checkpointFile{}
	}
	cp.PreparedClaims = slices.DeleteFunc(cp.PreparedClaims, func(c preparedClaim) bool { return c.UID == uid })
	if err := b.cache.RemoveSpec(b.specName(uid)); err != nil {
		return err
	}
	return b.writeCheckpoint(cp)
}

func (b *benchState) readCheckpoint() (*checkpointFile, error) {
	cp := &checkpointFile{}
	data, err := os.ReadFile(b.checkpoint)
	if errors.Is(err, fs.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, cp); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", b.checkpoint, err)
	}
	return cp, nil
}

// writeCheckpoint replaces the checkpoint: temp file in the same directory,
// fsync, rename. The directory is not fsynced.
func (b *benchState) writeCheckpoint(cp *checkpointFile) (err error) {
	cp.APIVersion, cp.Kind = "drastub.neuron.test/v1", "Checkpoint"
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(b.checkpoint), "tmp-checkpoint-*")
	if err != nil {
		return err
	}
	defer func() {
		if closeErr := tmp.Close(); closeErr != nil && err == nil {
			err = closeErr
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), b.checkpoint)
}
