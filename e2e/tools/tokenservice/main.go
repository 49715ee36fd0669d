// tokenservice is the OAuth 2.0 token service of the upstream-credentials e2e tests: an RFC 8693
// token-exchange grant that trades a Kubernetes ServiceAccount token (the caller's) for a JWT
// access token of another audience. The token endpoint, its request parsing, client
// authentication, the issued token and the response are github.com/zitadel/oidc/v3's OP (op
// package, RegisterServer over a LegacyServer); storage.go is the policy zitadel asks of an
// implementation. Nothing is written to disk; all configuration is by flags:
//
//	tokenservice --subject-key-file sa.pub --subject-audience AUD --audience AUD
//	             --client ID:SECRET [flags]
//
//	--listen ADDR            plain HTTP, default 127.0.0.1:0; the first stdout line is
//	                         "tokenservice: listening on http://ADDR"
//	--issuer URL             its own issuer, default http://ADDR; serves
//	                         /.well-known/openid-configuration, the token endpoint
//	                         (/oauth/token) and the JWKS (/keys) of its RS256 key (made at start)
//	--subject-issuer URL     the trusted issuer, default https://kubernetes.default.svc
//	--subject-key-file PATH  its public key(s), PEM "PUBLIC KEY" or "RSA PUBLIC KEY" (sa.pub);
//	                         tokens are verified with them whatever the kid
//	--subject-audience AUD   a subject_token's aud must contain it
//	--actor-audience AUD     an actor_token's aud must contain it; unset: actor tokens refused
//	--client ID:SECRET       a client (client_secret_basic or client_secret_post); repeatable
//	--assertion-client ID=SUB  a client authenticated by a client_assertion that is a token
//	                         of the trusted issuer with this sub; repeatable
//	--assertion-audience AUD a client_assertion's aud must contain it, default the issuer
//	--audience AUD           an audience (or resource) it issues for; repeatable, required
//	--refuse-subject SUB     exchanges for this subject are refused (invalid_grant); repeatable
//	--token-ttl DURATION     lifetime of issued tokens, default 300s (Go duration or seconds)
//
// GET /stats answers {"exchanges": N, "refused": M}: token-exchange requests answered with a
// token and with an error. One line per exchange goes to stderr, with client, subject, actor,
// audience and outcome, never a token or secret. SIGTERM or SIGINT stops it gracefully.
package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintf(os.Stderr, "tokenservice: %v\n", err)
		os.Exit(1)
	}
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// ttlFlag is a Go duration ("5s") or a number of seconds ("300").
type ttlFlag time.Duration

func (t *ttlFlag) String() string { return time.Duration(*t).String() }
func (t *ttlFlag) Set(v string) error {
	if n, err := strconv.Atoi(v); err == nil {
		*t = ttlFlag(time.Duration(n) * time.Second)
	} else if d, err := time.ParseDuration(v); err == nil {
		*t = ttlFlag(d)
	} else {
		return fmt.Errorf("%q is neither a duration nor seconds", v)
	}
	if time.Duration(*t) < time.Second {
		return errors.New("must be at least 1s")
	}
	return nil
}

// run serves until ctx is done, then shuts down gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokenservice", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve plain HTTP on")
	issuer := fs.String("issuer", "", "its own issuer (default http://<listen address>)")
	subjectIssuer := fs.String("subject-issuer", "https://kubernetes.default.svc", "the trusted issuer of subject and actor tokens")
	subjectKeyFile := fs.String("subject-key-file", "", "PEM public key(s) of the trusted issuer")
	subjectAudience := fs.String("subject-audience", "", "audience a subject_token must carry")
	actorAudience := fs.String("actor-audience", "", "audience an actor_token must carry (unset: actor tokens refused)")
	assertionAudience := fs.String("assertion-audience", "", "audience a client_assertion must carry (default the issuer)")
	ttl := ttlFlag(300 * time.Second)
	fs.Var(&ttl, "token-ttl", "lifetime of issued tokens")
	var clients, assertionClients, audiences, refused listFlag
	fs.Var(&clients, "client", "ID:SECRET of a client (repeatable)")
	fs.Var(&assertionClients, "assertion-client", "ID=SUB: a client authenticated by a trusted token with this sub (repeatable)")
	fs.Var(&audiences, "audience", "an audience it issues for (repeatable)")
	fs.Var(&refused, "refuse-subject", "a subject whose exchanges are refused (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case *subjectKeyFile == "":
		return errors.New("--subject-key-file is required")
	case *subjectAudience == "":
		return errors.New("--subject-audience is required")
	case len(audiences) == 0:
		return errors.New("at least one --audience is required")
	case len(clients)+len(assertionClients) == 0:
		return errors.New("at least one --client or --assertion-client is required")
	}

	trusted, err := readPublicKeys(*subjectKeyFile)
	if err != nil {
		return err
	}
	st := &storage{
		clients:         map[string]*client{},
		subjectIssuer:   *subjectIssuer,
		subjectAudience: *subjectAudience,
		actorAudience:   *actorAudience,
		audiences:       audiences,
		refused:         refused,
		ttl:             time.Duration(ttl),
		subjectVerifier: op.NewAccessTokenVerifier(*subjectIssuer, rsaKeys(trusted),
			op.WithSupportedAccessTokenSigningAlgorithms(string(jose.RS256))),
	}
	for _, c := range clients {
		id, secret, ok := strings.Cut(c, ":")
		if !ok || id == "" || secret == "" {
			return fmt.Errorf("--client wants ID:SECRET, got %d characters without", len(c))
		}
		st.clients[id] = &client{id: id, secret: secret}
	}
	bySubject := map[string]string{}
	for _, a := range assertionClients {
		id, sub, ok := strings.Cut(a, "=")
		if !ok || id == "" || sub == "" {
			return fmt.Errorf("--assertion-client wants ID=SUB, got %q", a)
		}
		bySubject[sub] = id
		if _, ok := st.clients[id]; !ok {
			st.clients[id] = &client{id: id}
		}
	}

	if st.signing, err = newSigningKey(); err != nil {
		return err
	}

	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	defer listener.Close()
	if *issuer == "" {
		*issuer = "http://" + listener.Addr().String()
	}
	if *assertionAudience == "" {
		*assertionAudience = *issuer
	}

	// zitadel logs through slog; keep only its server errors, so that stderr has our one line
	// per exchange.
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})))

	var cryptoKey [32]byte // encrypts opaque tokens, which are never issued; random anyway
	if _, err := rand.Read(cryptoKey[:]); err != nil {
		return err
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:               cryptoKey,
		AuthMethodPost:          true,
		AuthMethodPrivateKeyJWT: len(bySubject) > 0,
		SupportedScopes:         []string{},
	}, st, op.StaticIssuer(*issuer),
		op.WithAllowInsecure(), // http issuer on loopback
		op.WithAccessTokenKeySet(refuseKeys{}),
		op.WithIDTokenHintKeySet(refuseKeys{}),
	)
	if err != nil {
		return fmt.Errorf("issuer %q: %w", *issuer, err)
	}
	endpoints := op.Endpoints{
		Token:   op.NewEndpoint("oauth/token"),
		JwksURI: op.NewEndpoint("keys"),
	}
	srv := &server{
		LegacyServer:     op.NewLegacyServer(provider, endpoints),
		storage:          st,
		subjectIssuer:    *subjectIssuer,
		assertionClients: bySubject,
	}
	srv.assertionVerifier = op.NewJWTProfileVerifierKeySet(rsaKeys(trusted), *assertionAudience, 0, 0,
		op.SubjectCheck(srv.checkAssertionSubject))
	oidcHandler := op.RegisterServer(srv, endpoints,
		op.WithHTTPMiddleware(op.NewIssuerInterceptor(provider.IssuerFromRequest).Handler))

	stats := &counters{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /stats", stats.serve)
	mux.Handle("/", stats.count(endpoints.Token.Relative(), stderr, oidcHandler))

	httpServer := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "tokenservice: listening on http://%s\n", listener.Addr())
	fmt.Fprintf(stderr, "tokenservice: issuer %s, trusting %s (%d key(s)), %d client(s), audiences %q\n",
		*issuer, *subjectIssuer, len(trusted), len(st.clients), []string(audiences))

	served := make(chan error, 1)
	go func() { served <- httpServer.Serve(listener) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := httpServer.Shutdown(shutdownCtx); err != nil {
		return err
	}
	fmt.Fprintln(stderr, "tokenservice: stopped")
	return nil
}

// server is zitadel's LegacyServer with two methods adapted.
type server struct {
	*op.LegacyServer
	storage           *storage
	subjectIssuer     string
	assertionClients  map[string]string // sub -> client id
	assertionVerifier *op.JWTProfileVerifier
}

// VerifyClient authenticates a client_assertion that is a token of the trusted issuer whose
// sub is an --assertion-client; everything else goes to zitadel. zitadel's own private_key_jwt
// path (RFC 7523 section 3) wants iss == sub == the client id and looks the key up by client
// id: a Kubernetes ServiceAccount token has iss = the apiserver and sub =
// system:serviceaccount:NS:NAME. The verification is still zitadel's VerifyJWTAssertion (aud,
// exp, iat, signature), given our key set and a subject check.
func (s *server) VerifyClient(ctx context.Context, r *op.Request[op.ClientCredentials]) (op.Client, error) {
	note := noteFrom(ctx)
	if r.Data.ClientAssertionType != oidc.ClientAssertionTypeJWTAssertion {
		c, err := s.LegacyServer.VerifyClient(ctx, r)
		if err == nil {
			note.set(func(n *exchangeNote) { n.client = c.GetID() })
		}
		return c, err
	}
	if len(s.assertionClients) == 0 {
		return nil, oidc.ErrInvalidClient().WithDescription("client assertions are not accepted")
	}
	req, err := op.VerifyJWTAssertion(ctx, r.Data.ClientAssertion, s.assertionVerifier)
	if err != nil {
		note.set(func(n *exchangeNote) { n.reason = "client_assertion: " + err.Error() })
		return nil, oidc.ErrInvalidClient().WithDescription("client_assertion is invalid").WithParent(err)
	}
	id := s.assertionClients[req.Subject]
	if r.Data.ClientID != "" && r.Data.ClientID != id {
		note.set(func(n *exchangeNote) { n.reason = "client_assertion is for client " + id })
		return nil, oidc.ErrInvalidClient().WithDescription("client_id does not match the client_assertion")
	}
	note.set(func(n *exchangeNote) { n.client = id })
	return s.storage.GetClientByClientID(ctx, id)
}

func (s *server) checkAssertionSubject(req *oidc.JWTTokenRequest) error {
	if req.Issuer != s.subjectIssuer {
		return fmt.Errorf("%w: %q", oidc.ErrIssuerInvalid, req.Issuer)
	}
	if _, ok := s.assertionClients[req.Subject]; !ok {
		return fmt.Errorf("sub %q is no --assertion-client", req.Subject)
	}
	return nil
}

// JWTProfile refuses the jwt-bearer grant, which zitadel's provider always offers: this
// service exchanges tokens and nothing else.
func (s *server) JWTProfile(context.Context, *op.Request[oidc.JWTProfileGrantRequest]) (*op.Response, error) {
	return nil, oidc.ErrUnsupportedGrantType().WithDescription("only token exchange is served")
}

// TokenExchange is zitadel's, with the issued token's aud taken from `resource` when the
// request names no `audience` (zitadel would put the client id there).
func (s *server) TokenExchange(ctx context.Context, r *op.ClientRequest[oidc.TokenExchangeRequest]) (*op.Response, error) {
	if len(r.Data.Audience) == 0 {
		r.Data.Audience = append(oidc.Audience(nil), r.Data.Resource...)
	}
	return s.LegacyServer.TokenExchange(ctx, r)
}

func readPublicKeys(path string) ([]*rsa.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys []*rsa.PublicKey
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		var key any
		switch block.Type {
		case "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(block.Bytes)
		case "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rsaKey, ok := key.(*rsa.PublicKey)
		if !ok {
			return nil, fmt.Errorf("%s: a %T, not an RSA key", path, key)
		}
		keys = append(keys, rsaKey)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s: no PEM PUBLIC KEY or RSA PUBLIC KEY", path)
	}
	return keys, nil
}

// newSigningKey makes the service's RS256 key; its kid is the RFC 7638 thumbprint.
func newSigningKey() (*signingKey, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	thumb, err := (&jose.JSONWebKey{Key: &key.PublicKey}).Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, err
	}
	return &signingKey{id: base64.RawURLEncoding.EncodeToString(thumb), key: key}, nil
}

// --- counting and the log line ---

type counters struct{ exchanges, refused atomic.Int64 }

func (c *counters) serve(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]int64{"exchanges": c.exchanges.Load(), "refused": c.refused.Load()})
}

// exchangeNote collects, during one request, what the log line says beside the outcome.
type exchangeNote struct {
	mu                             sync.Mutex
	client, subject, actor, reason string
}

type noteKey struct{}

func noteFrom(ctx context.Context) *exchangeNote {
	if n, ok := ctx.Value(noteKey{}).(*exchangeNote); ok {
		return n
	}
	return &exchangeNote{}
}

func (n *exchangeNote) set(f func(*exchangeNote)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	f(n)
}

// count wraps the OP: a token-exchange request to the token endpoint is counted and logged
// once answered.
func (c *counters) count(tokenPath string, log io.Writer, next http.Handler) http.Handler {
	var logMu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != tokenPath || r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		// zitadel parses the form again; ParseForm keeps what it read.
		if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != string(oidc.GrantTypeTokenExchange) {
			next.ServeHTTP(w, r)
			return
		}
		note := &exchangeNote{}
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), noteKey{}, note)))

		note.mu.Lock()
		defer note.mu.Unlock()
		clientID := note.client
		if clientID == "" {
			if user, _, ok := r.BasicAuth(); ok {
				clientID = user + " (unverified)"
			} else if id := r.PostForm.Get("client_id"); id != "" {
				clientID = id + " (unverified)"
			}
		}
		audience := slices.Concat(r.PostForm["audience"], r.PostForm["resource"])
		var line string
		if rec.status == http.StatusOK {
			c.exchanges.Add(1)
			line = fmt.Sprintf("tokenservice: exchange ok client=%q subject=%q actor=%q audience=%q scope=%q",
				clientID, note.subject, note.actor, audience, r.PostForm.Get("scope"))
		} else {
			c.refused.Add(1)
			var e struct {
				Error       string `json:"error"`
				Description string `json:"error_description"`
			}
			json.Unmarshal(rec.body.Bytes(), &e)
			line = fmt.Sprintf("tokenservice: exchange refused status=%d error=%s description=%q client=%q subject=%q actor=%q audience=%q reason=%q",
				rec.status, e.Error, e.Description, clientID, note.subject, note.actor, audience, note.reason)
		}
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintln(log, line)
	})
}

// recorder keeps the status, and the body of an error answer (never a token: a 200's body is
// not kept).
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status != http.StatusOK && r.body.Len() < 4096 {
		r.body.Write(p)
	}
	return r.ResponseWriter.Write(p)
}
