package jobmanager

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/weirstream/weir/proto/weirpb"
)

// taskExecutors calls the TaskExecutorService of taskmanagers by address.
// Safe for concurrent use.
type taskExecutors interface {
	SubmitTask(ctx context.Context, addr string, d *weirpb.TaskDeployment) error
	CancelTask(ctx context.Context, addr string, id *weirpb.ExecutionID) error
	TriggerCheckpoint(ctx context.Context, addr string, req *weirpb.TriggerCheckpointRequest) error
	NotifyCheckpoint(ctx context.Context, addr string, req *weirpb.NotifyCheckpointRequest) error
	Close() error
}

var _ taskExecutors = (*grpcTaskExecutors)(nil)

// grpcTaskExecutors keeps one client connection per taskmanager address.
// Every call carries the fencing epoch that epoch returns at the time of
// the call (0 in ha: none), so that a taskmanager that has seen a newer
// leader rejects it. Connections use insecure credentials: the cluster
// runs on a trusted network (loopback in tests); TLS is future work.
type grpcTaskExecutors struct {
	epoch  func() int64
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newGRPCTaskExecutors(epoch func() int64) *grpcTaskExecutors {
	return &grpcTaskExecutors{epoch: epoch, conns: make(map[string]*grpc.ClientConn)}
}

func (g *grpcTaskExecutors) client(addr string) (weirpb.TaskExecutorServiceClient, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("jobmanager: shutting down")
	}
	cc := g.conns[addr]
	if cc == nil {
		var err error
		cc, err = grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connect to taskmanager at %s: %w", addr, err)
		}
		g.conns[addr] = cc
	}
	return weirpb.NewTaskExecutorServiceClient(cc), nil
}

func (g *grpcTaskExecutors) SubmitTask(ctx context.Context, addr string, d *weirpb.TaskDeployment) error {
	c, err := g.client(addr)
	if err != nil {
		return err
	}
	_, err = c.SubmitTask(ctx, &weirpb.SubmitTaskRequest{Task: d, Epoch: g.epoch()})
	return err
}

func (g *grpcTaskExecutors) CancelTask(ctx context.Context, addr string, id *weirpb.ExecutionID) error {
	c, err := g.client(addr)
	if err != nil {
		return err
	}
	_, err = c.CancelTask(ctx, &weirpb.CancelTaskRequest{Id: id, Epoch: g.epoch()})
	return err
}

func (g *grpcTaskExecutors) TriggerCheckpoint(ctx context.Context, addr string, req *weirpb.TriggerCheckpointRequest) error {
	c, err := g.client(addr)
	if err != nil {
		return err
	}
	req.Epoch = g.epoch()
	_, err = c.TriggerCheckpoint(ctx, req)
	return err
}

func (g *grpcTaskExecutors) NotifyCheckpoint(ctx context.Context, addr string, req *weirpb.NotifyCheckpointRequest) error {
	c, err := g.client(addr)
	if err != nil {
		return err
	}
	req.Epoch = g.epoch()
	_, err = c.NotifyCheckpoint(ctx, req)
	return err
}

// Close closes every connection; later calls fail.
func (g *grpcTaskExecutors) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	var errs []error
	for addr, cc := range g.conns {
		errs = append(errs, cc.Close())
		delete(g.conns, addr)
	}
	return errors.Join(errs...)
}
