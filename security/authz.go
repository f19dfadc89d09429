package security

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Policy says which roles may call each gRPC method of a server. A method
// it does not name is refused: new methods are closed until listed.
type Policy map[string][]Role

// taskManagerRequest is a request that names the taskmanager making it.
type taskManagerRequest interface{ GetTaskmanagerId() string }

// authorize returns ctx with the caller's identity, or the status error
// that refuses the call.
func (p Policy) authorize(ctx context.Context, method string, req any) (context.Context, error) {
	id, err := peerIdentity(ctx)
	if err != nil {
		return nil, err
	}
	allowed, ok := p[method]
	if !ok {
		return nil, status.Errorf(codes.PermissionDenied, "security: %s is not open to any caller", method)
	}
	if !slices.ContainsFunc(allowed, id.Has) {
		return nil, status.Errorf(codes.PermissionDenied, "security: %q (roles %v) may not call %s; it needs one of the roles %v",
			id.Name, id.Roles, method, allowed)
	}
	// A taskmanager's id is bound to its certificate.
	if r, ok := req.(taskManagerRequest); ok && id.Has(RoleTaskManager) && r.GetTaskmanagerId() != id.Name {
		return nil, status.Errorf(codes.PermissionDenied, "security: the certificate is taskmanager %q's; it may not act as taskmanager %q",
			id.Name, r.GetTaskmanagerId())
	}
	return WithIdentity(ctx, id), nil
}

// peerIdentity is the identity of the verified client certificate of the
// call in ctx.
func peerIdentity(ctx context.Context) (Identity, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return Identity{}, status.Error(codes.Unauthenticated, "security: no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return Identity{}, status.Error(codes.Unauthenticated, "security: the caller presented no verified client certificate")
	}
	return identityOf(info.State.VerifiedChains[0][0]), nil
}

// ServerOptions are the gRPC server options of a server with material m
// and policy p: TLS credentials and interceptors that authorize every
// call, in front of the given interceptors. For nil m (plaintext, loopback
// only) there is no TLS and no caller identity, and every call passes.
func (p Policy) ServerOptions(m *Material, unary ...grpc.UnaryServerInterceptor) []grpc.ServerOption {
	if m == nil {
		if len(unary) == 0 {
			return nil
		}
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unary...)}
	}
	auth := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := p.authorize(ctx, info.FullMethod, req)
		if err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		ctx, err := p.authorize(ss.Context(), info.FullMethod, nil)
		if err != nil {
			return err
		}
		return h(srv, &identityStream{ServerStream: ss, ctx: ctx})
	}
	return append(ServerOption(m),
		grpc.ChainUnaryInterceptor(append([]grpc.UnaryServerInterceptor{auth}, unary...)...),
		grpc.ChainStreamInterceptor(stream))
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }

// HTTPHandler wraps an HTTP handler served over mutual TLS with material
// m: reads (GET, HEAD) need the read role, everything else operate. For
// nil m it returns h unchanged.
func HTTPHandler(m *Material, h http.Handler) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
			httpError(w, http.StatusUnauthorized, "security: a verified client certificate is required")
			return
		}
		id := identityOf(r.TLS.VerifiedChains[0][0])
		need := RoleOperate
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			need = RoleRead
		}
		if !id.Has(need) {
			httpError(w, http.StatusForbidden, fmt.Sprintf("security: %q (roles %v) may not %s %s; it needs the %s role", id.Name, id.Roles, r.Method, r.URL.Path, need))
			return
		}
		h.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// httpError answers like the REST API does: a JSON object with the error.
func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
