package blobstore_test

import (
	"testing"

	"github.com/weirstream/weir/blobstore"
	"github.com/weirstream/weir/blobstore/blobstoretest"
)

func TestMemConformance(t *testing.T) {
	blobstoretest.RunConformance(t, func(t *testing.T) blobstore.Store { return blobstore.NewMem() })
}
