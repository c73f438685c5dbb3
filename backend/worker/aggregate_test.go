package worker

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/server"
)

// A worker that ended leaves its budget refusals in the totals (per VM too,
// one entry per VM however many ended); what it held goes with it.
func TestRetiredWorkersKeepTheirRefusals(t *testing.T) {
	m := NewManager(nil, hclog.NewNullLogger())
	m.init()
	r := server.Report{
		Budget: budget.Snapshot{Used: map[string]int64{"objects": 9}, Refused: map[string]int64{"objects": 2}},
		VMs: []server.VMStatus{
			{VM: "a", Budget: budget.Snapshot{Used: map[string]int64{"objects": 9}, Refused: map[string]int64{"objects": 2}}},
			{VM: "b", Budget: budget.Snapshot{Used: map[string]int64{"objects": 1}}},
		},
	}
	m.mu.Lock()
	m.retire(&r)
	m.retire(&r)
	m.mu.Unlock()
	agg := m.Aggregate()
	if agg.Budget.Refused["objects"] != 4 || agg.Budget.Used["objects"] != 0 {
		t.Fatalf("workers' budget after two ended: %+v", agg.Budget)
	}
	if a := agg.VMBudget["a"]; a.Refused["objects"] != 4 || a.Used["objects"] != 0 {
		t.Fatalf("VM a's: %+v", a)
	}
	if _, ok := agg.VMBudget["b"]; ok || len(m.retired.VMs) != 1 {
		t.Fatalf("a VM without refusals is kept: %+v, retired %+v", agg.VMBudget, m.retired.VMs)
	}
}
