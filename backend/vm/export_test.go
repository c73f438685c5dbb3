package vm

// Test helpers for the external test package (vm_test), which imports the
// real backend.
var (
	TestImage  = testImage
	TestLogger = testLogger
)

type SyncBuffer = syncBuffer
