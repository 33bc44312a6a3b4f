package netio

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ringlog/ringlog/internal/kwire"
	"github.com/ringlog/ringlog/metadata"
)

// Authorization of admin requests in cluster mode. The broker a client
// sent an admin request to checks that client's ACLs, resource by
// resource, as the single-broker handlers do; the resources it may
// change go on to the controller in one request (Cluster.Admin), the
// others are answered here with Kafka's *_AUTHORIZATION_FAILED, and the
// answer keeps the request's order. The controller checks nothing more
// for a forwarded request than the forwarding broker's own principal,
// which must be allowed CLUSTER_ACTION (a super user): brokers trust each
// other's checks, as Kafka's controller trusts the principal a forwarding
// broker puts in an Envelope.

// authorizedAdmin answers a cluster-mode admin request when the
// authorizer is on, reporting whether it did (false: the caller
// forwards it whole).
func (s *Server) authorizedAdmin(r *request, req kmsg.Request) bool {
	if s.cfg.Security.Authorizer == nil {
		return false
	}
	switch req := req.(type) {
	case *kmsg.CreateTopicsRequest:
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		resp.Topics = forwardAuthorized(r, req.Topics,
			func(t kmsg.CreateTopicsRequestTopic) bool { return r.mayCreateTopic(t.Topic) },
			func(t kmsg.CreateTopicsRequestTopic) kmsg.CreateTopicsResponseTopic {
				tr := kmsg.NewCreateTopicsResponseTopic()
				tr.Topic, tr.ErrorCode, tr.NumPartitions, tr.ReplicationFactor = t.Topic, kerr.TopicAuthorizationFailed.Code, -1, -1
				return tr
			},
			func(sub []kmsg.CreateTopicsRequestTopic) []kmsg.CreateTopicsResponseTopic {
				c := *req
				c.Topics = sub
				return s.adminCall(r, &c).(*kmsg.CreateTopicsResponse).Topics
			})
		r.respond(resp)
	case *kmsg.DeleteTopicsRequest:
		resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
		// As on a single broker (k20_delete_topics.go): a name the
		// principal may not DESCRIBE and DELETE is refused here, the same
		// whether the topic exists or not, never forwarded to learn that.
		mayDelete := func(name string) bool {
			return r.topicAllowed(kmsg.ACLOperationDescribe, name) && r.topicAllowed(kmsg.ACLOperationDelete, name)
		}
		denied := func(name *string, id [16]byte) kmsg.DeleteTopicsResponseTopic {
			tr := kmsg.NewDeleteTopicsResponseTopic()
			tr.Topic, tr.TopicID, tr.ErrorCode = name, id, kerr.TopicAuthorizationFailed.Code
			return tr
		}
		if req.Version < 6 {
			resp.Topics = forwardAuthorized(r, req.TopicNames,
				mayDelete,
				func(name string) kmsg.DeleteTopicsResponseTopic { return denied(&name, [16]byte{}) },
				func(sub []string) []kmsg.DeleteTopicsResponseTopic {
					c := *req
					c.TopicNames = sub
					return s.adminCall(r, &c).(*kmsg.DeleteTopicsResponse).Topics
				})
		} else {
			img := s.cfg.Cluster.Image()
			// nameOf names a topic given by name or by id; an id this
			// broker's image does not know is answered here, never
			// forwarded unchecked (the controller's image may know it).
			nameOf := func(t kmsg.DeleteTopicsRequestTopic) (string, bool) {
				if t.Topic != nil && *t.Topic != "" {
					return *t.Topic, true
				}
				if mt := img.TopicByID(metadata.UUID(t.TopicID)); mt != nil {
					return mt.Name, true
				}
				return "", false
			}
			resp.Topics = forwardAuthorized(r, req.Topics,
				func(t kmsg.DeleteTopicsRequestTopic) bool {
					name, ok := nameOf(t)
					return ok && mayDelete(name)
				},
				func(t kmsg.DeleteTopicsRequestTopic) kmsg.DeleteTopicsResponseTopic {
					name, ok := nameOf(t)
					switch {
					case !ok:
						tr := denied(nil, t.TopicID)
						tr.ErrorCode = kerr.UnknownTopicID.Code
						return tr
					case t.Topic != nil && *t.Topic != "":
						// By name: as given, with no id.
						return denied(t.Topic, t.TopicID)
					case r.topicAllowed(kmsg.ACLOperationDescribe, name):
						return denied(&name, t.TopicID)
					default:
						// A known id: its name only to whom may see it.
						return denied(nil, t.TopicID)
					}
				},
				func(sub []kmsg.DeleteTopicsRequestTopic) []kmsg.DeleteTopicsResponseTopic {
					c := *req
					c.Topics = sub
					return s.adminCall(r, &c).(*kmsg.DeleteTopicsResponse).Topics
				})
		}
		r.respond(resp)
	case *kmsg.CreatePartitionsRequest:
		resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
		resp.Topics = forwardAuthorized(r, req.Topics,
			func(t kmsg.CreatePartitionsRequestTopic) bool { return r.topicAllowed(kmsg.ACLOperationAlter, t.Topic) },
			func(t kmsg.CreatePartitionsRequestTopic) kmsg.CreatePartitionsResponseTopic {
				tr := kmsg.NewCreatePartitionsResponseTopic()
				tr.Topic, tr.ErrorCode = t.Topic, kerr.TopicAuthorizationFailed.Code
				return tr
			},
			func(sub []kmsg.CreatePartitionsRequestTopic) []kmsg.CreatePartitionsResponseTopic {
				c := *req
				c.Topics = sub
				return s.adminCall(r, &c).(*kmsg.CreatePartitionsResponse).Topics
			})
		r.respond(resp)
	case *kmsg.AlterConfigsRequest:
		resp := req.ResponseKind().(*kmsg.AlterConfigsResponse)
		resp.Resources = forwardAuthorized(r, req.Resources,
			func(rr kmsg.AlterConfigsRequestResource) bool {
				return r.configAllowed(kmsg.ACLOperationAlterConfigs, rr.ResourceType, rr.ResourceName)
			},
			func(rr kmsg.AlterConfigsRequestResource) kmsg.AlterConfigsResponseResource {
				out := kmsg.NewAlterConfigsResponseResource()
				out.ResourceType, out.ResourceName, out.ErrorCode = rr.ResourceType, rr.ResourceName, errCode(configAuthError(rr.ResourceType))
				return out
			},
			func(sub []kmsg.AlterConfigsRequestResource) []kmsg.AlterConfigsResponseResource {
				c := *req
				c.Resources = sub
				return s.adminCall(r, &c).(*kmsg.AlterConfigsResponse).Resources
			})
		r.respond(resp)
	case *kmsg.IncrementalAlterConfigsRequest:
		resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
		resp.Resources = forwardAuthorized(r, req.Resources,
			func(rr kmsg.IncrementalAlterConfigsRequestResource) bool {
				return r.configAllowed(kmsg.ACLOperationAlterConfigs, rr.ResourceType, rr.ResourceName)
			},
			func(rr kmsg.IncrementalAlterConfigsRequestResource) kmsg.IncrementalAlterConfigsResponseResource {
				out := kmsg.NewIncrementalAlterConfigsResponseResource()
				out.ResourceType, out.ResourceName, out.ErrorCode = rr.ResourceType, rr.ResourceName, errCode(configAuthError(rr.ResourceType))
				return out
			},
			func(sub []kmsg.IncrementalAlterConfigsRequestResource) []kmsg.IncrementalAlterConfigsResponseResource {
				c := *req
				c.Resources = sub
				return s.adminCall(r, &c).(*kmsg.IncrementalAlterConfigsResponse).Resources
			})
		r.respond(resp)
	default:
		return false
	}
	return true
}

// adminCall is Cluster.Admin for part of a request r carried.
func (s *Server) adminCall(r *request, req kmsg.Request) kmsg.Response {
	ctx, cancel := context.WithTimeout(context.Background(), clusterAdminTimeout)
	defer cancel()
	return s.cfg.Cluster.Admin(ctx, req, clientName(r) == kwire.ForwardClientID)
}

// forwardAuthorized answers entries in order: those allowed by one call
// of forward (with just them), the others with denied. A denied entry
// is a failed request (r.failed).
func forwardAuthorized[E, R any](r *request, entries []E, allowed func(E) bool, denied func(E) R, forward func([]E) []R) []R {
	ok := make([]bool, len(entries))
	var sub []E
	for i, e := range entries {
		if ok[i] = allowed(e); ok[i] {
			sub = append(sub, e)
		} else {
			r.failed = true
		}
	}
	var fwd []R
	if len(sub) > 0 {
		fwd = forward(sub)
	}
	out := make([]R, 0, len(entries))
	for i, e := range entries {
		switch {
		case !ok[i]:
			out = append(out, denied(e))
		case len(fwd) > 0:
			out = append(out, fwd[0])
			fwd = fwd[1:]
		}
	}
	return out
}
