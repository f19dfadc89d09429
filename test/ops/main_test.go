package ops

import (
	"os"
	"testing"

	"github.com/weirstream/weir/test/clustertest"
)

// TestMain removes the cluster binaries the tests built (clustertest.Main).
func TestMain(m *testing.M) { os.Exit(clustertest.Main(m)) }
