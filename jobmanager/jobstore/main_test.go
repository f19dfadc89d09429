package jobstore_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// No ignores: the embedded etcd servers and the ha clients of the
	// conformance suite leave no goroutines behind once closed, and Dir
	// starts none.
	goleak.VerifyTestMain(m)
}
