package sim

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// Cluster limits of the modelled H100 (sm_90): a portable cluster has at
// most 8 blocks, a kernel that allows non-portable sizes
// (CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) at most 16; a
// cluster's blocks are co-scheduled on the SMs of one GPC, of which the
// model has gpcCount sharing the device's SMs as evenly as they go.
const (
	maxPortableCluster = 8
	maxCluster         = 16
	gpcCount           = 7 // H100 PCIe: 114 SMs in 7 GPCs

	funcClusterSizeMustBeSet = 10
	funcNonPortableCluster   = 14
)

// clusterShape returns the cluster shape a launch of fn with cfg uses:
// cfg's, or fn's compile-time one; it checks them against each other and
// the device's limits as the driver does (CUDA_ERROR_INVALID_CLUSTER_SIZE).
// A launch that names no cluster and whose kernel has none gets (1,1,1)
// and ok false.
func clusterShape(op string, fn *function, cfg *device.LaunchConfig) (shape [3]uint32, ok bool, err error) {
	fn.mu.Lock()
	req := [3]uint32{uint32(fn.attrs[funcRequiredClusterWidth]), uint32(fn.attrs[funcRequiredClusterWidth+1]), uint32(fn.attrs[funcRequiredClusterWidth+2])}
	nonPortable := fn.attrs[funcNonPortableCluster] != 0
	fn.mu.Unlock()
	if cfg.ClusterPolicy > 2 {
		return shape, false, device.Errorf(op, device.ErrInvalidValue, "cluster scheduling policy %d (0 default, 1 spread, 2 load balancing)", cfg.ClusterPolicy)
	}
	given := cfg.Cluster != [3]uint32{}
	hasReq := req != [3]uint32{}
	switch {
	case given && hasReq && cfg.Cluster != req:
		return shape, false, device.Errorf(op, device.ErrInvalidClusterSize, "cluster %v, the kernel requires %v", cfg.Cluster, req)
	case given:
		shape = cfg.Cluster
	case hasReq:
		shape = req
	default:
		return [3]uint32{1, 1, 1}, false, nil
	}
	n := uint64(1)
	for i := range shape {
		if shape[i] == 0 {
			return shape, false, device.Errorf(op, device.ErrInvalidClusterSize, "cluster %v has a 0 dimension", shape)
		}
		n *= uint64(min(shape[i], maxCluster+1)) // capped: no product overflows
	}
	limit := uint64(maxPortableCluster)
	if nonPortable {
		limit = maxCluster
	}
	if n > limit {
		return shape, false, device.Errorf(op, device.ErrInvalidClusterSize, "cluster %v of %d blocks > %d (set CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED for up to %d)", shape, n, limit, maxCluster)
	}
	return shape, true, nil
}

// OccupancyMaxClusters computes how many clusters fit at once: each GPC
// holds (its SMs × blocks per SM) / (blocks per cluster) of them, blocks
// per SM as OccupancyMaxBlocks computes. Without a cluster shape (neither
// in cfg nor compiled into the kernel) it fails as the driver does.
func (c *Context) OccupancyMaxClusters(f device.Function, cfg device.LaunchConfig) (int32, error) {
	const op = "cuOccupancyMaxActiveClusters"
	fn, err := c.function(op, f)
	if err != nil {
		return 0, err
	}
	threads := uint64(1)
	for i := range cfg.Block {
		if cfg.Block[i] == 0 || cfg.Block[i] > uint32(c.props.Attrs[attrMaxBlockDimX+i]) {
			return 0, device.Errorf(op, device.ErrInvalidValue, "block %v", cfg.Block)
		}
		threads *= uint64(cfg.Block[i])
	}
	if threads > uint64(c.props.Attrs[attrMaxThreadsPerBlock]) {
		return 0, device.Errorf(op, device.ErrInvalidValue, "%d threads per block > %d", threads, c.props.Attrs[attrMaxThreadsPerBlock])
	}
	shape, ok, err := clusterShape(op, fn, &cfg)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, device.Errorf(op, device.ErrInvalidClusterSize, "no cluster shape: give CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION or compile the kernel with one")
	}
	perSM, err := c.OccupancyMaxBlocks(f, int(threads), uint64(cfg.SharedMem), 0)
	if err != nil || perSM == 0 {
		return 0, err
	}
	size := int(shape[0] * shape[1] * shape[2])
	sms := int(c.props.Attrs[attrSMCount])
	total := 0
	for g := 0; g < gpcCount; g++ {
		inGPC := sms / gpcCount
		if g < sms%gpcCount {
			inGPC++
		}
		total += inGPC * int(perSM) / size
	}
	return int32(total), nil
}

// Allocation granularity of the modelled H100 for device memory: 2 MiB,
// minimum and recommended alike (what driver 580 answers there).
const allocGranularity = 2 << 20

// MemGetGranularity answers cuMemGetAllocationGranularity for pinned
// device memory.
func (c *Context) MemGetGranularity(p device.AllocProp, option uint32) (uint64, error) {
	const op = "cuMemGetAllocationGranularity"
	if err := c.broken(op); err != nil {
		return 0, err
	}
	if option > 1 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "granularity option %d (0 minimum, 1 recommended)", option)
	}
	if p.Type != 1 {
		return 0, device.Errorf(op, device.ErrInvalidValue, "allocation type %d (the sim models CU_MEM_ALLOCATION_TYPE_PINNED, 1)", p.Type)
	}
	return allocGranularity, nil
}
