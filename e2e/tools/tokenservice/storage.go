package main

// The storage/policy half of the token service: what zitadel's OP asks of an implementation
// (op.Storage, op.TokenExchangeStorage, op.TokenExchangeTokensVerifierStorage, op.Client).
// Everything that parses requests, authenticates clients by secret, builds and signs the
// issued token and writes the response is zitadel's.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// clockLeeway is how far in the future a subject or actor token's nbf or iat may be. exp gets
// none: an expired token is refused the second it expires.
const clockLeeway = 2 * time.Second

var errNotServed = errors.New("not served by this token-exchange-only service")

// storage implements op.Storage and the token-exchange storage interfaces.
type storage struct {
	signing       *signingKey
	clients       map[string]*client
	subjectIssuer string
	// subjectVerifier checks iss, the RS256 signature (against the trusted keys, whatever the
	// kid) and exp of subject and actor tokens: zitadel's access-token verifier.
	subjectVerifier *op.AccessTokenVerifier
	subjectAudience string
	actorAudience   string // empty: actor tokens are refused
	audiences       []string
	refused         []string
	ttl             time.Duration
}

// client is one --client / --assertion-client entry.
type client struct {
	id     string
	secret string // empty: only a client assertion authenticates it
}

func (c *client) GetID() string                    { return c.id }
func (c *client) RedirectURIs() []string           { return nil }
func (c *client) PostLogoutRedirectURIs() []string { return nil }
func (c *client) ApplicationType() op.ApplicationType {
	return op.ApplicationTypeWeb // confidential
}
func (c *client) AuthMethod() oidc.AuthMethod {
	if c.secret == "" {
		return oidc.AuthMethodPrivateKeyJWT
	}
	return oidc.AuthMethodBasic
}
func (c *client) ResponseTypes() []oidc.ResponseType { return nil }
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeTokenExchange}
}
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return 0 }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(string) bool           { return true }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// signingKey is the service's RS256 key, generated at start; it implements op.SigningKey and
// op.Key.
type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) ID() string                                  { return k.id }

// Key is the private key for signing (op.SigningKey); publicKey is what the JWKS serves.
func (k *signingKey) Key() any { return k.key }

type publicKey struct{ *signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }

// --- op.AuthStorage: only what a token-exchange grant uses is served ---

func (s *storage) CreateAuthRequest(context.Context, *oidc.AuthRequest, string) (op.AuthRequest, error) {
	return nil, oidc.ErrRequestNotSupported().WithParent(errNotServed)
}
func (s *storage) AuthRequestByID(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotServed
}
func (s *storage) AuthRequestByCode(context.Context, string) (op.AuthRequest, error) {
	return nil, errNotServed
}
func (s *storage) SaveAuthCode(context.Context, string, string) error { return errNotServed }
func (s *storage) DeleteAuthRequest(context.Context, string) error    { return errNotServed }

// CreateAccessToken names and times the token zitadel is about to sign.
func (s *storage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return "", time.Time{}, err
	}
	return hex.EncodeToString(id), time.Now().Add(s.ttl), nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, oidc.ErrInvalidRequest().WithDescription("refresh tokens are not issued")
}
func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, errNotServed
}
func (s *storage) TerminateSession(context.Context, string, string) error { return errNotServed }
func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	return oidc.ErrRequestNotSupported().WithParent(errNotServed)
}
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}
func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.signing, nil }
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}
func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{s.signing}}, nil
}

// --- op.OPStorage ---

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("unknown client %q", id)
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	c, ok := s.clients[id]
	if !ok || c.secret == "" || subtle.ConstantTimeCompare([]byte(c.secret), []byte(secret)) != 1 {
		return errors.New("wrong client id or secret")
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}
func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return errNotServed
}
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errNotServed
}
func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, nil
}
func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotServed
}
func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errNotServed
}
func (s *storage) Health(context.Context) error { return nil }

// --- op.TokenExchangeTokensVerifierStorage: the trusted issuer's tokens ---

func (s *storage) VerifyExchangeSubjectToken(ctx context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	id, sub, claims, err := s.verifyTrusted(ctx, token, tokenType, s.subjectAudience)
	note := noteFrom(ctx)
	if err != nil {
		note.set(func(n *exchangeNote) { n.reason = "subject_token: " + err.Error() })
		return "", "", nil, err
	}
	note.set(func(n *exchangeNote) { n.subject = sub })
	return id, sub, claims, nil
}

func (s *storage) VerifyExchangeActorToken(ctx context.Context, token string, tokenType oidc.TokenType) (string, string, map[string]any, error) {
	note := noteFrom(ctx)
	if s.actorAudience == "" {
		err := errors.New("actor tokens are not accepted (no --actor-audience)")
		note.set(func(n *exchangeNote) { n.reason = "actor_token: " + err.Error() })
		return "", "", nil, err
	}
	id, sub, claims, err := s.verifyTrusted(ctx, token, tokenType, s.actorAudience)
	if err != nil {
		note.set(func(n *exchangeNote) { n.reason = "actor_token: " + err.Error() })
		return "", "", nil, err
	}
	note.set(func(n *exchangeNote) { n.actor = sub })
	return id, sub, claims, nil
}

// verifyTrusted accepts a JWT of the trusted issuer (a Kubernetes ServiceAccount token): iss,
// RS256 signature and exp by zitadel's access-token verifier, then aud, sub, nbf and iat.
// Both token types a JWT may be presented as are accepted: `jwt` and `access_token`.
func (s *storage) verifyTrusted(ctx context.Context, token string, tokenType oidc.TokenType, audience string) (string, string, map[string]any, error) {
	if tokenType != oidc.JWTTokenType && tokenType != oidc.AccessTokenType {
		return "", "", nil, fmt.Errorf("token type %q is not accepted (only %s or %s)", tokenType, oidc.JWTTokenType, oidc.AccessTokenType)
	}
	c, err := op.VerifyAccessToken[*oidc.AccessTokenClaims](ctx, token, s.subjectVerifier)
	if err != nil {
		return "", "", nil, err
	}
	if err := oidc.CheckSubject(c); err != nil {
		return "", "", nil, err
	}
	if err := oidc.CheckAudience(c, audience); err != nil {
		return "", "", nil, fmt.Errorf("%w: must contain %q", oidc.ErrAudience, audience)
	}
	now := time.Now()
	if nbf := c.NotBefore.AsTime(); !nbf.IsZero() && now.Add(clockLeeway).Before(nbf) {
		return "", "", nil, fmt.Errorf("not valid before %s", nbf.UTC().Format(time.RFC3339))
	}
	if iat := c.IssuedAt.AsTime(); !iat.IsZero() && now.Add(clockLeeway).Before(iat) {
		return "", "", nil, oidc.ErrIatInFuture
	}
	// Every claim, with iss, so that ValidateTokenExchangeRequest can tell a token verified
	// here from anything else.
	var all map[string]any
	if _, err := oidc.ParseToken(token, &all); err != nil {
		return "", "", nil, err
	}
	return c.JWTID, c.Subject, all, nil
}

// rsaKeys verifies a signature with any of the trusted public keys, whatever the kid says.
type rsaKeys []*rsa.PublicKey

func (k rsaKeys) VerifySignature(_ context.Context, jws *jose.JSONWebSignature) ([]byte, error) {
	var last error
	for _, key := range k {
		payload, err := jws.Verify(key)
		if err == nil {
			return payload, nil
		}
		last = err
	}
	return nil, last
}

// refuseKeys is the key set zitadel's own access-token and id_token verifiers get: subject
// and actor tokens come only from the trusted issuer, never from this service itself.
type refuseKeys struct{}

func (refuseKeys) VerifySignature(context.Context, *jose.JSONWebSignature) ([]byte, error) {
	return nil, errors.New("tokens of this service are not exchanged")
}

// --- op.TokenExchangeStorage: the policy ---

func (s *storage) ValidateTokenExchangeRequest(ctx context.Context, req op.TokenExchangeRequest) error {
	note := noteFrom(ctx)
	note.set(func(n *exchangeNote) { n.client = req.GetClientID() })

	// Only tokens verifyTrusted accepted (belt and braces: zitadel's own verifiers are given
	// refuseKeys, so nothing else reaches here).
	if iss, _ := req.GetExchangeSubjectTokenClaims()["iss"].(string); iss != s.subjectIssuer {
		return oidc.ErrInvalidRequest().WithDescription("subject_token is invalid")
	}
	if req.GetExchangeActor() != "" {
		if iss, _ := req.GetExchangeActorTokenClaims()["iss"].(string); iss != s.subjectIssuer {
			return oidc.ErrInvalidRequest().WithDescription("actor_token is invalid")
		}
	}

	// The issued token is a JWT access token, whether access_token or jwt was asked for.
	switch req.GetRequestedTokenType() {
	case "", oidc.AccessTokenType, oidc.JWTTokenType:
		req.SetRequestedTokenType(oidc.AccessTokenType)
	default:
		note.set(func(n *exchangeNote) { n.reason = "requested_token_type " + string(req.GetRequestedTokenType()) })
		return oidc.ErrInvalidRequest().WithDescription("only access tokens are issued")
	}

	targets := append(slices.Clone(req.GetAudience()), req.GetResourses()...)
	if len(targets) == 0 {
		return oidc.ErrInvalidRequest().WithDescription("audience or resource is required")
	}
	for _, t := range targets {
		if !slices.Contains(s.audiences, t) {
			note.set(func(n *exchangeNote) { n.reason = fmt.Sprintf("audience %q is not served", t) })
			return oidc.ErrInvalidTarget().WithDescription("audience %q is not served", t)
		}
	}

	if slices.Contains(s.refused, req.GetSubject()) {
		note.set(func(n *exchangeNote) { n.reason = "subject refused by --refuse-subject" })
		return oidc.ErrInvalidGrant().WithDescription("the subject may not exchange tokens")
	}

	req.SetCurrentScopes(slices.DeleteFunc(slices.Clone(req.GetScopes()), func(s string) bool { return s == "" }))
	return nil
}

func (s *storage) CreateTokenExchangeRequest(context.Context, op.TokenExchangeRequest) error {
	return nil
}

// GetPrivateClaimsFromTokenExchangeRequest adds scope and act to the claims zitadel sets
// (iss, sub, aud, exp, iat, nbf, jti, client_id).
func (s *storage) GetPrivateClaimsFromTokenExchangeRequest(_ context.Context, req op.TokenExchangeRequest) (map[string]any, error) {
	claims := map[string]any{}
	if scopes := req.GetScopes(); len(scopes) > 0 {
		claims["scope"] = strings.Join(scopes, " ")
	}
	if actor := req.GetExchangeActor(); actor != "" {
		claims["act"] = map[string]any{"sub": actor}
	}
	return claims, nil
}

func (s *storage) SetUserinfoFromTokenExchangeRequest(context.Context, *oidc.UserInfo, op.TokenExchangeRequest) error {
	return nil
}
