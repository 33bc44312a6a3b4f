package netio

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/kwire"
)

// The admin requests that change topics and configs (CreateTopics,
// DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs)
// take one path in both modes:
//
//   - the handler authorizes each resource for the client, turns it
//     into a value of package admin and checks its shape there; a
//     resource refused is answered here;
//   - on a single broker, and on the controller in cluster mode, each
//     accepted resource goes to the admin.Service (Config.Admin: the
//     engine or the cluster), which checks it against its state and
//     applies it;
//   - on any other broker in cluster mode, the accepted resources go on
//     to the controller in one request of the same kind (KIP-590 style),
//     whose answers take their places. The controller checks the
//     forwarded request against the forwarding broker's own principal, a
//     super user (broker.Config.Validate makes sure of it): brokers
//     trust each other's checks, as Kafka's controller trusts the
//     principal a forwarding broker puts in an Envelope. A request
//     that was itself forwarded (client id kwire.ForwardClientID) and
//     meets a broker that is not the controller gets NOT_CONTROLLER.
//
// adminEntries is the one place an admin answer is put together; the
// ACL and credential APIs, forwarded whole, answer a failed forward with
// adminError.

// clusterAdminTimeout bounds one admin request in cluster mode (a
// forward, a proposal and its commit); forwardedAdminTimeout bounds one
// that was forwarded here, so that the controller answers before the
// forwarding broker gives up (a change it gave up on may still commit:
// clients see REQUEST_TIMED_OUT and check).
const (
	clusterAdminTimeout   = 30 * time.Second
	forwardedAdminTimeout = 20 * time.Second
)

// adminEntries answers entries, in order. prepare authorizes and checks
// one entry: it returns the call that applies it, or its answer when it
// is refused here. forward sends the accepted entries to the controller
// in one request (cluster mode on another broker) and returns its
// answers and true, or false on the controller and a single broker,
// where the calls run here. failed answers an entry whose forward
// failed.
func adminEntries[E, R any](r *request, entries []E,
	prepare func(E) (apply func(context.Context) R, refused R),
	forward func(context.Context, []E) ([]R, bool, error),
	failed func(E, error) R) []R {
	out := make([]R, len(entries))
	applies := make([]func(context.Context) R, len(entries))
	var sub []E
	for i, e := range entries {
		applies[i], out[i] = prepare(e)
		if applies[i] != nil {
			sub = append(sub, e)
		}
	}
	if len(sub) == 0 {
		return out
	}
	budget := clusterAdminTimeout
	if clientName(r) == kwire.ForwardClientID {
		budget = forwardedAdminTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	answers, forwarded, err := forward(ctx, sub)
	if err == nil && forwarded && len(answers) != len(sub) {
		err = fmt.Errorf("%w: the controller answered %d of %d", kerr.UnknownServerError, len(answers), len(sub))
	}
	for i, e := range entries {
		switch {
		case applies[i] == nil:
		case err != nil:
			r.failed = true
			out[i] = failed(e, err)
		case forwarded:
			out[i], answers = answers[0], answers[1:]
		default:
			out[i] = applies[i](ctx)
		}
	}
	return out
}

// forwardPart is adminEntries' forward for a request of kind Resp: the
// accepted entries go to the controller in a copy of the request,
// with(sub), and of reads their answers from the controller's response.
func forwardPart[E, R any, Resp kmsg.Response](s *Server, r *request, with func(sub []E) kmsg.Request, of func(Resp) []R) func(context.Context, []E) ([]R, bool, error) {
	return func(ctx context.Context, sub []E) ([]R, bool, error) {
		resp, ok, err := s.forward(ctx, r, with(sub))
		if err != nil || !ok {
			return nil, false, err
		}
		typed, isResp := resp.(Resp)
		if !isResp {
			return nil, false, fmt.Errorf("%w: the controller answered a %T", kerr.UnknownServerError, resp)
		}
		return of(typed), true, nil
	}
}

// Peers is the client of the other brokers' Kafka listeners that
// forwards requests to the controller (cluster mode; internal/peerwire).
type Peers interface {
	// Call sends req to the broker at addr and returns its response.
	Call(ctx context.Context, addr string, req kmsg.Request) (kmsg.Response, error)
}

// forward sends req to the controller and returns its answer and true;
// false on the controller (and on a single broker), which answers req
// itself. A request that was itself forwarded here, on a broker that is
// not the controller, and one no controller can take now, get an error
// wrapping NOT_CONTROLLER, which clients retry: nothing travels in
// circles while the controller changes.
func (s *Server) forward(ctx context.Context, r *request, req kmsg.Request) (kmsg.Response, bool, error) {
	cl := s.cfg.Cluster
	if cl == nil {
		return nil, false, nil
	}
	addr, self, err := cl.Controller()
	switch {
	case self:
		return nil, false, nil
	case clientName(r) == kwire.ForwardClientID:
		return nil, false, fmt.Errorf("%w: this broker is not the controller", kerr.NotController)
	case err != nil:
		return nil, false, err
	case s.cfg.Peers == nil:
		return nil, false, fmt.Errorf("%w: this broker cannot reach the other brokers (no Peers)", kerr.NotController)
	}
	resp, err := s.cfg.Peers.Call(ctx, addr, req)
	if err != nil {
		return nil, false, fmt.Errorf("%w: forwarding to the controller at %s: %v", kerr.NotController, addr, err)
	}
	return resp, true, nil
}

// adminError answers every resource of an ACL or credential request
// with err's code and message (its forward to the controller failed).
func adminError(req kmsg.Request, err error) kmsg.Response {
	code, m := errCode(err), errMessage(err)
	switch r := req.(type) {
	case *kmsg.CreateACLsRequest:
		resp := r.ResponseKind().(*kmsg.CreateACLsResponse)
		for range r.Creations {
			res := kmsg.NewCreateACLsResponseResult()
			res.ErrorCode, res.ErrorMessage = code, m
			resp.Results = append(resp.Results, res)
		}
		return resp
	case *kmsg.DeleteACLsRequest:
		resp := r.ResponseKind().(*kmsg.DeleteACLsResponse)
		for range r.Filters {
			res := kmsg.NewDeleteACLsResponseResult()
			res.ErrorCode, res.ErrorMessage = code, m
			resp.Results = append(resp.Results, res)
		}
		return resp
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		seen := map[string]bool{}
		add := func(user string) {
			if !seen[user] {
				seen[user] = true
				res := kmsg.NewAlterUserSCRAMCredentialsResponseResult()
				res.User, res.ErrorCode, res.ErrorMessage = user, code, m
				resp.Results = append(resp.Results, res)
			}
		}
		for _, d := range r.Deletions {
			add(d.Name)
		}
		for _, u := range r.Upsertions {
			add(u.Name)
		}
		return resp
	}
	return req.ResponseKind()
}
