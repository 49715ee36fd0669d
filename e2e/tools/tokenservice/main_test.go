package main

// The smoke test: the service in-process on a loopback port, driven over HTTP only, with
// tokens signed and checked by the standard library alone (no zitadel, no go-jose), so the
// service is judged by something that is not its own code.
//
//	cd e2e/tools/tokenservice && GOWORK=off go test -count=1 -v .

import (
	"bufio"
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	k8sIssuer   = "https://kubernetes.default.svc"
	serviceAud  = "tokenservice"
	actorAud    = "tokenservice-actor"
	apiAud      = "mcp.streamco.example"
	clientID    = "capstan"
	secret      = "s3cr3t-value-never-logged"
	caller      = "system:serviceaccount:team:caller"
	sidecar     = "system:serviceaccount:capstan:sidecar"
	banned      = "system:serviceaccount:team:banned"
	assertionID = "capstan-wi"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// signJWT signs claims with RS256 as the Kubernetes apiserver does (header kid included).
func signJWT(t *testing.T, key *rsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": kid, "typ": "JWT"})
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	input := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(payload)
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// saToken is a ServiceAccount token as a TokenRequest would give it.
func saToken(t *testing.T, key *rsa.PrivateKey, sub string, aud []string, edit func(map[string]any)) string {
	now := time.Now()
	claims := map[string]any{
		"iss": k8sIssuer, "sub": sub, "aud": aud,
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(),
		"jti":           "some-jti",
		"kubernetes.io": map[string]any{"namespace": "team", "serviceaccount": map[string]any{"name": "x", "uid": "u"}},
	}
	if edit != nil {
		edit(claims)
	}
	return signJWT(t, key, "apiserver-kid", claims)
}

type service struct {
	base   string
	stderr *lockedBuffer
	stop   func() error
}

func start(t *testing.T, saPub string, extra ...string) *service {
	t.Helper()
	args := append([]string{
		"--listen", "127.0.0.1:0",
		"--subject-key-file", saPub,
		"--subject-audience", serviceAud,
		"--actor-audience", actorAud,
		"--client", clientID + ":" + secret,
		"--assertion-client", assertionID + "=" + sidecar,
		"--audience", apiAud,
		"--audience", "https://other.example/api",
		"--refuse-subject", banned,
	}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	stderr := &lockedBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, outW, stderr); outW.Close() }()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("first line: %v (stderr: %s)", err, stderr)
	}
	go io.Copy(io.Discard, outR)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "tokenservice: listening on ")
	if !ok {
		t.Fatalf("first line %q", line)
	}
	stopped := false
	s := &service{base: addr, stderr: stderr, stop: func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		return <-done
	}}
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *service) getJSON(t *testing.T, url string, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

// exchange posts a token-exchange request; basic authenticates with client_secret_basic.
func (s *service) exchange(t *testing.T, form url.Values, basic bool) (int, map[string]any) {
	t.Helper()
	form.Set("grant_type", "urn:ietf:params:oauth:grant-type:token-exchange")
	req, _ := http.NewRequest(http.MethodPost, s.base+"/oauth/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if basic {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("status %s, body not JSON: %v", resp.Status, err)
	}
	return resp.StatusCode, body
}

// verify checks the issued token against the JWKS the discovery document names, with the
// standard library, and returns its header and claims.
func (s *service) verify(t *testing.T, token string) (map[string]any, map[string]any) {
	t.Helper()
	var disco struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
		Grants  []string
	}
	s.getJSON(t, s.base+"/.well-known/openid-configuration", &disco)
	var jwks struct {
		Keys []struct{ Kty, Kid, Alg, Use, N, E string }
	}
	s.getJSON(t, disco.JWKSURI, &jwks)
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %d parts", len(parts))
	}
	var header, claims map[string]any
	decodeSegment(t, parts[0], &header)
	decodeSegment(t, parts[1], &claims)
	if header["alg"] != "RS256" || header["kid"] == "" {
		t.Fatalf("header %v", header)
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	for _, k := range jwks.Keys {
		if k.Kid != header["kid"] {
			continue
		}
		if k.Kty != "RSA" || k.Alg != "RS256" || k.Use != "sig" {
			t.Fatalf("jwk %+v", k)
		}
		n, _ := base64.RawURLEncoding.DecodeString(k.N)
		e, _ := base64.RawURLEncoding.DecodeString(k.E)
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if err := rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig); err != nil {
			t.Fatalf("signature: %v", err)
		}
		if claims["iss"] != disco.Issuer || disco.Issuer != s.base {
			t.Fatalf("iss %v, discovery issuer %v, base %v", claims["iss"], disco.Issuer, s.base)
		}
		return header, claims
	}
	t.Fatalf("kid %v not in the JWKS", header["kid"])
	return nil, nil
}

func decodeSegment(t *testing.T, seg string, into any) {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, into); err != nil {
		t.Fatal(err)
	}
}

func writeKey(t *testing.T, key *rsa.PrivateKey) string {
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sa.pub")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestTokenExchange(t *testing.T) {
	apiserver, _ := rsa.GenerateKey(rand.Reader, 2048)
	stranger, _ := rsa.GenerateKey(rand.Reader, 2048)
	s := start(t, writeKey(t, apiserver))

	subject := saToken(t, apiserver, caller, []string{"kube", serviceAud}, nil)
	actor := saToken(t, apiserver, sidecar, []string{actorAud}, nil)
	planted := []string{secret, subject, actor}
	wantOK, wantRefused := 0, 0

	ok := func(t *testing.T, form url.Values, basic bool) map[string]any {
		t.Helper()
		status, body := s.exchange(t, form, basic)
		wantOK++
		if status != 200 {
			t.Fatalf("status %d: %v", status, body)
		}
		if body["token_type"] != "Bearer" || body["issued_token_type"] != "urn:ietf:params:oauth:token-type:access_token" {
			t.Fatalf("response %v", body)
		}
		if e, _ := body["expires_in"].(float64); e < 298 || e > 300 {
			t.Fatalf("expires_in %v", body["expires_in"])
		}
		planted = append(planted, body["access_token"].(string))
		return body
	}
	refused := func(t *testing.T, form url.Values, basic bool, status int, code string) {
		t.Helper()
		got, body := s.exchange(t, form, basic)
		wantRefused++
		if got != status || body["error"] != code {
			t.Fatalf("got %d %v, want %d %s", got, body, status, code)
		}
		if _, leaked := body["access_token"]; leaked {
			t.Fatal("refused with a token")
		}
	}
	form := func(kv ...string) url.Values {
		v := url.Values{}
		for i := 0; i < len(kv); i += 2 {
			v.Add(kv[i], kv[i+1])
		}
		return v
	}
	jwtType := "urn:ietf:params:oauth:token-type:jwt"
	atType := "urn:ietf:params:oauth:token-type:access_token"

	t.Run("basic, with actor and scopes", func(t *testing.T) {
		body := ok(t, form("subject_token", subject, "subject_token_type", jwtType,
			"actor_token", actor, "actor_token_type", atType,
			"audience", apiAud, "scope", "streams.read streams.write"), true)
		if body["scope"] != "streams.read streams.write" {
			t.Fatalf("response scope %v", body["scope"])
		}
		_, c := s.verify(t, body["access_token"].(string))
		if c["sub"] != caller || !slices.Equal(toStrings(c["aud"]), []string{apiAud}) || c["client_id"] != clientID ||
			c["scope"] != "streams.read streams.write" || c["jti"] == "" {
			t.Fatalf("claims %v", c)
		}
		if act, _ := c["act"].(map[string]any); act["sub"] != sidecar || len(act) != 1 {
			t.Fatalf("act %v", c["act"])
		}
		exp, iat := c["exp"].(float64), c["iat"].(float64)
		if exp-iat < 299 || exp-iat > 301 || iat > float64(time.Now().Unix()) {
			t.Fatalf("iat %v exp %v", iat, exp)
		}
	})
	t.Run("post, access_token type, no actor, requested jwt", func(t *testing.T) {
		body := ok(t, form("subject_token", subject, "subject_token_type", atType, "audience", apiAud,
			"requested_token_type", jwtType, "client_id", clientID, "client_secret", secret), false)
		_, c := s.verify(t, body["access_token"].(string))
		if c["sub"] != caller || c["act"] != nil || c["scope"] != nil {
			t.Fatalf("claims %v", c)
		}
	})
	t.Run("resource only", func(t *testing.T) {
		body := ok(t, form("subject_token", subject, "subject_token_type", jwtType, "resource", "https://other.example/api"), true)
		_, c := s.verify(t, body["access_token"].(string))
		if !slices.Equal(toStrings(c["aud"]), []string{"https://other.example/api"}) {
			t.Fatalf("aud %v", c["aud"])
		}
	})
	t.Run("client assertion (ServiceAccount token)", func(t *testing.T) {
		assertion := saToken(t, apiserver, sidecar, []string{s.base}, nil)
		planted = append(planted, assertion)
		body := ok(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud,
			"client_id", assertionID, "client_assertion", assertion,
			"client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"), false)
		if _, c := s.verify(t, body["access_token"].(string)); c["client_id"] != assertionID {
			t.Fatalf("claims %v", c)
		}
	})

	// The refusals.
	t.Run("unlisted audience", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", "evil.example"), true, 400, "invalid_target")
	})
	t.Run("unlisted resource", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "resource", "https://evil.example/"), true, 400, "invalid_target")
	})
	t.Run("refused subject", func(t *testing.T) {
		refused(t, form("subject_token", saToken(t, apiserver, banned, []string{serviceAud}, nil), "subject_token_type", jwtType, "audience", apiAud), true, 400, "invalid_grant")
	})
	// zitadel answers every subject_token it cannot accept with invalid_request, as RFC 8693
	// section 2.2.2 prescribes.
	for name, token := range map[string]string{
		"expired subject": saToken(t, apiserver, caller, []string{serviceAud}, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Second).Unix() }),
		"wrong audience":  saToken(t, apiserver, caller, []string{"kube"}, nil),
		"wrong issuer":    saToken(t, apiserver, caller, []string{serviceAud}, func(c map[string]any) { c["iss"] = "https://evil.example" }),
		"untrusted key":   saToken(t, stranger, caller, []string{serviceAud}, nil),
		"not yet valid":   saToken(t, apiserver, caller, []string{serviceAud}, func(c map[string]any) { c["nbf"] = time.Now().Add(time.Minute).Unix() }),
		"no exp":          saToken(t, apiserver, caller, []string{serviceAud}, func(c map[string]any) { delete(c, "exp") }),
		"not a JWT":       "opaque",
	} {
		t.Run(name, func(t *testing.T) {
			refused(t, form("subject_token", token, "subject_token_type", jwtType, "audience", apiAud), true, 400, "invalid_request")
		})
	}
	t.Run("id_token subject type", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", "urn:ietf:params:oauth:token-type:id_token", "audience", apiAud), true, 400, "invalid_request")
	})
	t.Run("actor with the subject's audience", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "actor_token", subject, "actor_token_type", jwtType, "audience", apiAud), true, 400, "invalid_request")
	})
	t.Run("a token of this service as subject", func(t *testing.T) {
		_, b := s.exchange(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud), true)
		wantOK++
		mine := b["access_token"].(string)
		planted = append(planted, mine)
		refused(t, form("subject_token", mine, "subject_token_type", atType, "audience", apiAud), true, 400, "invalid_request")
	})
	t.Run("no audience", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType), true, 400, "invalid_request")
	})
	t.Run("refresh token asked for", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "requested_token_type", "urn:ietf:params:oauth:token-type:refresh_token"), true, 400, "invalid_request")
	})
	t.Run("wrong secret", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "client_id", clientID, "client_secret", "wrong"), false, 400, "invalid_client")
	})
	t.Run("wrong secret, basic", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/oauth/token", strings.NewReader(url.Values{
			"grant_type":         {"urn:ietf:params:oauth:grant-type:token-exchange"},
			"subject_token":      {subject},
			"subject_token_type": {jwtType},
			"audience":           {apiAud},
		}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(clientID, "wrong")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		wantRefused++
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		// zitadel answers 400 here, where RFC 6749 section 5.2 asks for 401.
		if resp.StatusCode != 400 || body["error"] != "invalid_client" {
			t.Fatalf("%s %v", resp.Status, body)
		}
	})
	t.Run("unknown client", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "client_id", "nobody", "client_secret", secret), false, 400, "invalid_client")
	})
	t.Run("no client authentication", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud), false, 400, "invalid_request")
	})
	t.Run("secret for the assertion-only client", func(t *testing.T) {
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "client_id", assertionID, "client_secret", secret), false, 400, "invalid_client")
	})
	t.Run("assertion of another ServiceAccount", func(t *testing.T) {
		a := saToken(t, apiserver, caller, []string{s.base}, nil)
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "client_assertion", a,
			"client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"), false, 400, "invalid_client")
	})
	t.Run("assertion for another audience", func(t *testing.T) {
		a := saToken(t, apiserver, sidecar, []string{serviceAud}, nil)
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "client_assertion", a,
			"client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"), false, 400, "invalid_client")
	})
	t.Run("expired assertion", func(t *testing.T) {
		a := saToken(t, apiserver, sidecar, []string{s.base}, func(c map[string]any) { c["exp"] = time.Now().Add(-time.Second).Unix() })
		refused(t, form("subject_token", subject, "subject_token_type", jwtType, "audience", apiAud, "client_assertion", a,
			"client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"), false, 400, "invalid_client")
	})

	t.Run("stats", func(t *testing.T) {
		var stats map[string]int
		s.getJSON(t, s.base+"/stats", &stats)
		if stats["exchanges"] != wantOK || stats["refused"] != wantRefused {
			t.Fatalf("stats %v, want %d exchanges and %d refused", stats, wantOK, wantRefused)
		}
	})
	t.Run("other endpoints and grants refuse", func(t *testing.T) {
		for _, path := range []string{"/authorize", "/userinfo", "/oauth/introspect", "/revoke"} {
			resp, err := http.Get(s.base + path)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Fatalf("%s: %s", path, resp.Status)
			}
		}
		for _, grant := range []string{"client_credentials", "authorization_code", "urn:ietf:params:oauth:grant-type:jwt-bearer"} {
			resp, err := http.PostForm(s.base+"/oauth/token", url.Values{"grant_type": {grant}, "client_id": {clientID},
				"client_secret": {secret}, "assertion": {subject}, "code": {"x"}, "redirect_uri": {"http://x"}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 4 {
				t.Fatalf("%s: %s", grant, resp.Status)
			}
		}
	})

	if err := s.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	log := s.stderr.String()
	for _, p := range planted {
		if strings.Contains(log, p) {
			t.Fatalf("a token or secret is in the log:\n%s", log)
		}
	}
	if n := strings.Count(log, "tokenservice: exchange "); n != wantOK+wantRefused {
		t.Fatalf("%d exchange lines, want %d:\n%s", n, wantOK+wantRefused, log)
	}
	if !strings.Contains(log, `exchange ok client="capstan" subject="`+caller+`" actor="`+sidecar+`"`) ||
		!strings.Contains(log, "error=invalid_target") || !strings.Contains(log, "tokenservice: stopped") {
		t.Fatalf("log:\n%s", log)
	}
	t.Logf("stderr:\n%s", log)
}

func TestShortTTL(t *testing.T) {
	apiserver, _ := rsa.GenerateKey(rand.Reader, 2048)
	s := start(t, writeKey(t, apiserver), "--token-ttl", "5s")
	status, body := s.exchange(t, url.Values{
		"subject_token":      {saToken(t, apiserver, caller, []string{serviceAud}, nil)},
		"subject_token_type": {"urn:ietf:params:oauth:token-type:jwt"},
		"audience":           {apiAud},
	}, true)
	if status != 200 {
		t.Fatalf("%d %v", status, body)
	}
	if e := body["expires_in"].(float64); e < 4 || e > 5 {
		t.Fatalf("expires_in %v", e)
	}
	_, c := s.verify(t, body["access_token"].(string))
	if d := c["exp"].(float64) - c["iat"].(float64); d < 4 || d > 6 {
		t.Fatalf("exp - iat = %v", d)
	}
}

func TestFlags(t *testing.T) {
	apiserver, _ := rsa.GenerateKey(rand.Reader, 2048)
	pub := writeKey(t, apiserver)
	for _, args := range [][]string{
		{"--subject-audience", "a", "--audience", "b", "--client", "c:d"},
		{"--subject-key-file", pub, "--audience", "b", "--client", "c:d"},
		{"--subject-key-file", pub, "--subject-audience", "a", "--client", "c:d"},
		{"--subject-key-file", pub, "--subject-audience", "a", "--audience", "b"},
		{"--subject-key-file", pub, "--subject-audience", "a", "--audience", "b", "--client", "nosecret"},
		{"--subject-key-file", pub, "--subject-audience", "a", "--audience", "b", "--client", "c:d", "--token-ttl", "0"},
		{"--subject-key-file", pub, "--subject-audience", "a", "--audience", "b", "--client", "c:d", "--issuer", "ftp://x"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Fatalf("%q accepted", args)
		}
	}
}

func toStrings(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, s := range v {
			str, _ := s.(string)
			out = append(out, str)
		}
		return out
	}
	return nil
}
