package cuda

import (
	"testing"

	"github.com/ebitengine/purego"
)

// BenchmarkPuregoCall compares the two ways this package can call a C
// function through purego, on libc's labs (no GPU needed): a function
// bound with purego.RegisterFunc (reflection builds each call's frame)
// and purego.SyscallN with the arguments passed as uintptrs. The hot
// driver calls (hot.go) use SyscallN.
func BenchmarkPuregoCall(b *testing.B) {
	h, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		b.Skip("no libc.so.6:", err)
	}
	sym, err := purego.Dlsym(h, "labs")
	if err != nil {
		b.Skip(err)
	}
	var labs func(v int64) int64
	purego.RegisterFunc(&labs, sym)
	var labs5 func(a, b, c, d, e int64) int64 // as many words as cuMemcpyDtoHAsync and more
	purego.RegisterFunc(&labs5, sym)
	b.Run("RegisterFunc-1arg", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if labs(-7) != 7 {
				b.Fatal("labs")
			}
		}
	})
	b.Run("RegisterFunc-5args", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			if labs5(-7, 1, 2, 3, 4) != 7 {
				b.Fatal("labs")
			}
		}
	})
	b.Run("SyscallN-1arg", func(b *testing.B) {
		b.ReportAllocs()
		v := int64(-7)
		for i := 0; i < b.N; i++ {
			if r, _, _ := purego.SyscallN(sym, uintptr(v)); r != 7 {
				b.Fatal("labs")
			}
		}
	})
	b.Run("SyscallN-5args", func(b *testing.B) {
		b.ReportAllocs()
		v := int64(-7)
		for i := 0; i < b.N; i++ {
			if r, _, _ := purego.SyscallN(sym, uintptr(v), 1, 2, 3, 4); r != 7 {
				b.Fatal("labs")
			}
		}
	})
	b.Run("SyscallN-11args", func(b *testing.B) { // cuLaunchKernel's count
		b.ReportAllocs()
		v := int64(-7)
		for i := 0; i < b.N; i++ {
			if r, _, _ := purego.SyscallN(sym, uintptr(v), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10); r != 7 {
				b.Fatal("labs")
			}
		}
	})
}
