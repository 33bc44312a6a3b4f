package security

import "crypto/sha256"

// decoy is the credential an exchange uses for a user who has none of
// mechanism m, so that answers and timing do not say who exists: its
// salt is derived from the Store's secret key and the name (the same one
// each time the name is tried, as a real user's is), its iteration count
// is Kafka's default, and its keys are derived from the same secret, so
// no password yields them. Exchanges refuse a decoy's user even so.
func (s *Store) decoy(user string, m Mechanism) ScramCredential {
	seed := hmacSum(sha256.New, s.decoyKey, string(m)+"\x00"+user)
	h := m.newHash()
	return ScramCredential{
		Mechanism:  m,
		Salt:       seed[:saltSize],
		Iterations: MinIterations,
		StoredKey:  hmacSum(h, seed, "Stored Key"),
		ServerKey:  hmacSum(h, seed, "Server Key"),
	}
}
