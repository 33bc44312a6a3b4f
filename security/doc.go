// Package security owns who a client is and what it may do: SCRAM
// credentials (salted, as RFC 5802 stores them), the SASL server
// exchanges for PLAIN and SCRAM-SHA-256/512, the ACL authorizer with
// Kafka's resource, pattern and operation semantics, and the file that
// keeps credentials and ACLs in a single broker's data directory.
// It knows nothing of sockets or the Kafka wire format.
package security
