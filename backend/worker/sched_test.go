package worker_test

import (
	"runtime"
	"time"
)

// runtimeGosched yields while polling a condition with a deadline.
func runtimeGosched() {
	runtime.Gosched()
	<-time.After(time.Millisecond)
}
