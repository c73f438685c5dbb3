package cuda

import (
	"os"
	"reflect"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
)

// TestLoadBindsEntryPoints runs wherever libcuda.so.1 is installed, GPU or
// not (Debian's 535 driver library on CI): every entry point the backend
// uses resolves through cuGetProcAddress or dlsym, and a missing one (535
// lacks cuFuncGetParamInfo) is bound to a stub that answers 801.
func TestLoadBindsEntryPoints(t *testing.T) {
	l, err := load()
	if err != nil {
		t.Skipf("no usable libcuda.so.1 here: %v", err)
	}
	v := reflect.ValueOf(l).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		name := v.Type().Field(i).Name
		if f.Kind() == reflect.Func && f.IsNil() && name != "getProcV1" && name != "getProcV2" {
			t.Errorf("entry point field %s is nil after load: every one must be bound or stubbed", name)
		}
	}
	var missing []string
	for n := range l.absent {
		missing = append(missing, n)
	}
	t.Logf("libcuda CUDA %d; cuGetProcAddress_v2 %v; unbound: %v", l.version, l.getProcV2 != nil, missing)
	for _, need := range []string{"cuMemAlloc", "cuMemcpyHtoDAsync", "cuLaunchKernel", "cuMemHostRegister", "cuLaunchHostFunc", "cuEventElapsedTime", "cuStreamCreateWithPriority"} {
		for _, m := range missing {
			if m == need {
				t.Errorf("%s is not bound", need)
			}
		}
	}
	if l.version >= 12040 && !l.has("cuFuncGetParamInfo") {
		t.Error("a CUDA 12.4+ driver without cuFuncGetParamInfo bound")
	}
}

// TestParamsFromImage: without cuFuncGetParamInfo the layout comes from the
// module image the guest sent (here real nvcc 11.8 output).
func TestParamsFromImage(t *testing.T) {
	img, err := os.ReadFile("../image/testdata/kc.fatbin")
	if err != nil {
		t.Fatal(err)
	}
	c := newContext(&Driver{l: &lib{version: 12020}}, 0, 0, 0)
	c.images[1] = img
	c.fnMod[7], c.fnName[7] = 1, "withstruct"
	c.fnMod[8], c.fnName[8] = 1, "nosuch"
	ps, err := c.paramsFromImage(7)
	if err != nil {
		t.Fatal(err)
	}
	want := []device.Param{{Offset: 0, Size: 1}, {Offset: 8, Size: 24}, {Offset: 32, Size: 2}, {Offset: 40, Size: 8}}
	if !reflect.DeepEqual(ps, want) {
		t.Fatalf("layout %v, want %v", ps, want)
	}
	if _, err := c.paramsFromImage(8); device.ResultOf(err) != device.ErrNotSupported {
		t.Fatalf("unknown kernel: %v", err)
	}
}
