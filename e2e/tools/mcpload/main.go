// mcpload is the benchmarks' independent side (docs/performance.md, "Two harnesses"): an MCP
// load client built on the official Go SDK, so that the sidecar's cost is also measured by a
// client that is not the project's; and an echo server on the same SDK, for cross-checking an
// upstream that is not rmcp by hand (the bench's upstreams are `echo-upstream`).
//
//	mcpload serve [--listen ADDR] [--json]
//	    Serve one tool, `echo` (returns its `text` argument), over Streamable HTTP at
//	    http://ADDR/mcp; prints "mcpload: listening on http://ADDR" once listening (the
//	    first line the testkit's other servers print too). --json answers POSTs with
//	    application/json instead of an SSE stream.
//
//	mcpload call --target NAME,URL,TOOL[,PROTOCOL] [--target ...] [--watch LABEL=PID ...]
//	             [--header 'Name: value' ...] [--target-header 'NAME=Name: value' ...] [options]
//	    Open --sessions sessions on each target (URL is http://... or unix:/path/to/socket;
//	    PROTOCOL the revision asked for there, --protocol when absent: 2026-07-28 connects
//	    with server/discover and keeps no session),
//	    then run --rounds rounds of --calls calls per session, all sessions concurrently,
//	    the targets alternated round by round with this one client. Prints one JSON object:
//	    per target the median over rounds of p50, p99 and calls/s, the client's own CPU per
//	    call, and for each watched process its CPU per call during that target's rounds;
//	    with --setups, the median cold session (connect, initialize or discover, tools/list,
//	    close) per target, alternated.
//
//	mcpload open --target NAME,URL,TOOL --sessions N
//	    Open N sessions on one target, print "open" and hold them until stdin closes.
//
//	mcpload script --target NAME,URL,-[,PROTOCOL] [--header ...] OPS
//	    One session on the target running OPS, a JSON list of {"op": "tools"} (the names
//	    tools/list shows, every page) and {"op": "call", "name": N, "arguments": {...}};
//	    prints a JSON object: the session's instructions and one entry per op (the names, or
//	    the call's isError, structuredContent and text, or the error the call raised).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: mcpload serve|call|open [flags] (see the comment at the top of main.go)")
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "call":
		err = call(os.Args[2:])
	case "open":
		err = open(os.Args[2:])
	case "script":
		err = script(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: serve, call, open or script", os.Args[1])
	}
	if err != nil {
		fail(err.Error())
	}
}

func fail(message string) {
	fmt.Fprintln(os.Stderr, "mcpload:", message)
	os.Exit(2)
}

type echoInput struct {
	Text string `json:"text" jsonschema:"the text to return"`
}

func serve(args []string) error {
	flags := flag.NewFlagSet("serve", flag.ContinueOnError)
	listen := flags.String("listen", "127.0.0.1:0", "address to listen on")
	jsonResponse := flags.Bool("json", false, "answer POSTs with application/json, not SSE")
	if err := flags.Parse(args); err != nil {
		return err
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "mcpload-echo", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "echo", Description: "Returns its text argument."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoInput) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server },
		&mcp.StreamableHTTPOptions{JSONResponse: *jsonResponse})
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	fmt.Printf("mcpload: listening on http://%s\n", listener.Addr())
	return http.Serve(listener, handler)
}

// target is one endpoint the load is sent to, and the tool called there.
type target struct {
	name, url, tool, protocol string
	client                    *http.Client
}

func parseTarget(spec string) (target, error) {
	parts := strings.Split(spec, ",")
	if len(parts) < 3 || len(parts) > 4 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return target{}, fmt.Errorf("--target %q: want NAME,URL,TOOL[,PROTOCOL]", spec)
	}
	t := target{name: parts[0], url: parts[1], tool: parts[2]}
	if len(parts) == 4 {
		t.protocol = parts[3]
	}
	// Enough idle connections for every session's POSTs and GET stream: Go's default of two
	// per host would reconnect on most calls under concurrency.
	transport := &http.Transport{MaxIdleConns: 0, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}
	if socket, ok := strings.CutPrefix(t.url, "unix:"); ok {
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}
		t.url = "http://localhost/mcp"
	}
	t.client = &http.Client{Transport: transport}
	return t, nil
}

// headers adds fixed headers (the sidecar's project header, a token) to every request.
type headers struct {
	next   http.RoundTripper
	values [][2]string
}

func (h headers) RoundTrip(request *http.Request) (*http.Response, error) {
	request = request.Clone(request.Context())
	for _, kv := range h.values {
		request.Header.Set(kv[0], kv[1])
	}
	return h.next.RoundTrip(request)
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, " ") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

type options struct {
	targets  []target
	watch    map[string]int
	sessions int
	calls    int
	rounds   int
	warmup   int
	setups   int
	args     map[string]any
}

func parseOptions(name string, args []string) (options, error) {
	flags := flag.NewFlagSet(name, flag.ContinueOnError)
	var targetSpecs, headerSpecs, targetHeaderSpecs, watchSpecs repeated
	flags.Var(&targetSpecs, "target", "NAME,URL,TOOL (repeatable); URL http://... or unix:/socket")
	flags.Var(&headerSpecs, "header", "'Name: value' sent with every request (repeatable)")
	flags.Var(&targetHeaderSpecs, "target-header", "'TARGET=Name: value' sent with every request to the target named TARGET (repeatable)")
	flags.Var(&watchSpecs, "watch", "LABEL=PID whose CPU time is read around each round (repeatable)")
	protocol := flags.String("protocol", "2025-11-25", "protocol version asked for where a target names none")
	sessions := flags.Int("sessions", 1, "concurrent sessions per target")
	calls := flags.Int("calls", 400, "calls per session per round")
	rounds := flags.Int("rounds", 5, "rounds per target, alternated")
	warmup := flags.Int("warmup", 20, "calls per session before the first round")
	setups := flags.Int("setups", 0, "cold sessions measured per target, alternated")
	arguments := flags.String("args", `{"text":"orders"}`, "the tool's arguments (JSON object)")
	if err := flags.Parse(args); err != nil {
		return options{}, err
	}
	o := options{watch: map[string]int{}, sessions: *sessions, calls: *calls,
		rounds: *rounds, warmup: *warmup, setups: *setups}
	if len(targetSpecs) == 0 {
		return o, fmt.Errorf("at least one --target is needed")
	}
	var extra [][2]string
	for _, spec := range headerSpecs {
		k, v, ok := strings.Cut(spec, ":")
		if !ok {
			return o, fmt.Errorf("--header %q: want 'Name: value'", spec)
		}
		extra = append(extra, [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	only := map[string][][2]string{}
	for _, spec := range targetHeaderSpecs {
		name, header, found := strings.Cut(spec, "=")
		k, v, ok := strings.Cut(header, ":")
		if !found || !ok {
			return o, fmt.Errorf("--target-header %q: want 'TARGET=Name: value'", spec)
		}
		only[name] = append(only[name], [2]string{strings.TrimSpace(k), strings.TrimSpace(v)})
	}
	for _, spec := range targetSpecs {
		t, err := parseTarget(spec)
		if err != nil {
			return o, err
		}
		values := append(append([][2]string{}, extra...), only[t.name]...)
		t.client.Transport = headers{next: t.client.Transport, values: values}
		if t.protocol == "" {
			t.protocol = *protocol
		}
		o.targets = append(o.targets, t)
	}
	for _, spec := range watchSpecs {
		label, pid, ok := strings.Cut(spec, "=")
		n, err := strconv.Atoi(pid)
		if !ok || err != nil {
			return o, fmt.Errorf("--watch %q: want LABEL=PID", spec)
		}
		o.watch[label] = n
	}
	if err := json.Unmarshal([]byte(*arguments), &o.args); err != nil {
		return o, fmt.Errorf("--args: %v", err)
	}
	return o, nil
}

func connect(ctx context.Context, t target) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpload", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{Endpoint: t.url, HTTPClient: t.client, MaxRetries: -1}
	session, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: t.protocol})
	if err != nil {
		return nil, fmt.Errorf("%s: connecting: %w", t.name, err)
	}
	return session, nil
}

func callOnce(ctx context.Context, session *mcp.ClientSession, t target, args map[string]any) error {
	result, err := session.CallTool(ctx, &mcp.CallToolParams{Name: t.tool, Arguments: args})
	if err != nil {
		return fmt.Errorf("%s: calling %s: %w", t.name, t.tool, err)
	}
	if result.IsError {
		return fmt.Errorf("%s: %s answered an error: %v", t.name, t.tool, result.Content)
	}
	return nil
}

// round runs calls per session on every session at once: each call's latency, and the wall time.
func round(ctx context.Context, sessions []*mcp.ClientSession, t target, calls int, args map[string]any) ([]time.Duration, time.Duration, error) {
	latencies := make([][]time.Duration, len(sessions))
	errs := make([]error, len(sessions))
	var wg sync.WaitGroup
	started := time.Now()
	for i, session := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				t0 := time.Now()
				if err := callOnce(ctx, session, t, args); err != nil {
					errs[i] = err
					return
				}
				latencies[i] = append(latencies[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	wall := time.Since(started)
	var all []time.Duration
	for i := range sessions {
		if errs[i] != nil {
			return nil, 0, errs[i]
		}
		all = append(all, latencies[i]...)
	}
	return all, wall, nil
}

// cpuSeconds is a process's CPU time: for this process getrusage; for another the sum of its
// threads' scheduler accounting (/proc/PID/task/*/schedstat, nanoseconds), so a round of a few
// hundred calls is measured without the 10 ms ticks of /proc/PID/stat. A thread that ends takes
// its time with it: cpuSince falls back to the ticks then.
type cpuReading struct {
	nanos   float64
	ticked  float64
	precise bool
}

func cpuSeconds(pid int) cpuReading {
	if pid == 0 {
		var usage syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &usage)
		s := float64(usage.Utime.Nano()+usage.Stime.Nano()) / 1e9
		return cpuReading{nanos: s, ticked: s, precise: true}
	}
	reading := cpuReading{ticked: tickedSeconds(pid)}
	threads, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return reading
	}
	for _, thread := range threads {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, thread.Name()))
		if err != nil {
			continue
		}
		fields := strings.Fields(string(stat))
		if len(fields) > 0 {
			n, _ := strconv.ParseFloat(fields[0], 64)
			reading.nanos += n / 1e9
		}
	}
	reading.precise = true
	return reading
}

// cpuSince is the CPU seconds between two readings: the precise figure unless it disagrees with
// the ticks by more than two of them (a thread ended in between).
func cpuSince(now, earlier cpuReading) float64 {
	ticked := now.ticked - earlier.ticked
	if !now.precise || !earlier.precise {
		return ticked
	}
	precise := now.nanos - earlier.nanos
	if precise-ticked > 0.02 || ticked-precise > 0.02 {
		return ticked
	}
	return precise
}

// tickedSeconds is a process's user + system CPU time from /proc (clock ticks of 1/100 s),
// every thread that ever ran included.
func tickedSeconds(pid int) float64 {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after its closing paren are fixed.
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

type roundStats struct {
	P50ms, P99ms, CallsPerSecond float64
}

type targetReport struct {
	Calls          int                `json:"calls_per_round"`
	P50ms          float64            `json:"p50_ms"`
	P99ms          float64            `json:"p99_ms"`
	CallsPerSecond float64            `json:"calls_per_s"`
	Rounds         []roundStats       `json:"rounds"`
	ClientCPUus    float64            `json:"client_cpu_us_per_call"`
	WatchedCPUus   map[string]float64 `json:"cpu_us_per_call"`
	SetupP50ms     float64            `json:"setup_p50_ms,omitempty"`
}

func median(values []float64) float64 {
	sorted := append([]float64(nil), values...)
	sort.Float64s(sorted)
	return sorted[len(sorted)/2]
}

func percentile(sorted []time.Duration, p float64) float64 {
	index := int(float64(len(sorted)-1)*p + 0.5)
	return float64(sorted[index].Nanoseconds()) / 1e6
}

func call(args []string) error {
	o, err := parseOptions("call", args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	reports := map[string]*targetReport{}
	sessions := map[string][]*mcp.ClientSession{}
	for _, t := range o.targets {
		reports[t.name] = &targetReport{Calls: o.sessions * o.calls, WatchedCPUus: map[string]float64{}}
		for range o.sessions {
			session, err := connect(ctx, t)
			if err != nil {
				return err
			}
			defer session.Close()
			sessions[t.name] = append(sessions[t.name], session)
		}
		if _, _, err := round(ctx, sessions[t.name], t, o.warmup, o.args); err != nil {
			return err
		}
	}
	clientCPU := map[string]float64{}
	watched := map[string]map[string]float64{}
	for range o.rounds {
		for _, t := range o.targets {
			before := map[string]cpuReading{"": cpuSeconds(0)}
			for label, pid := range o.watch {
				before[label] = cpuSeconds(pid)
			}
			latencies, wall, err := round(ctx, sessions[t.name], t, o.calls, o.args)
			if err != nil {
				return err
			}
			clientCPU[t.name] += cpuSince(cpuSeconds(0), before[""])
			if watched[t.name] == nil {
				watched[t.name] = map[string]float64{}
			}
			for label, pid := range o.watch {
				watched[t.name][label] += cpuSince(cpuSeconds(pid), before[label])
			}
			sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
			r := reports[t.name]
			r.Rounds = append(r.Rounds, roundStats{percentile(latencies, 0.5), percentile(latencies, 0.99),
				float64(len(latencies)) / wall.Seconds()})
		}
	}
	total := float64(o.rounds * o.sessions * o.calls)
	for _, t := range o.targets {
		if total == 0 {
			break
		}
		r := reports[t.name]
		var p50, p99, rate []float64
		for _, s := range r.Rounds {
			p50, p99, rate = append(p50, s.P50ms), append(p99, s.P99ms), append(rate, s.CallsPerSecond)
		}
		if len(r.Rounds) > 0 {
			r.P50ms, r.P99ms, r.CallsPerSecond = median(p50), median(p99), median(rate)
		}
		r.ClientCPUus = clientCPU[t.name] / total * 1e6
		for label, seconds := range watched[t.name] {
			r.WatchedCPUus[label] = seconds / total * 1e6
		}
	}
	if err := setups(ctx, o, reports); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(reports)
}

// setups measures cold sessions, the targets alternated: connect, tools/list, close.
func setups(ctx context.Context, o options, reports map[string]*targetReport) error {
	if o.setups == 0 {
		return nil
	}
	times := map[string][]float64{}
	for range o.setups {
		for _, t := range o.targets {
			started := time.Now()
			session, err := connect(ctx, t)
			if err != nil {
				return err
			}
			if _, err := session.ListTools(ctx, nil); err != nil {
				return fmt.Errorf("%s: tools/list: %w", t.name, err)
			}
			_ = session.Close()
			times[t.name] = append(times[t.name], float64(time.Since(started).Nanoseconds())/1e6)
		}
	}
	for name, values := range times {
		reports[name].SetupP50ms = median(values)
	}
	return nil
}

func open(args []string) error {
	o, err := parseOptions("open", args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	t := o.targets[0]
	for range o.sessions {
		session, err := connect(ctx, t)
		if err != nil {
			return err
		}
		defer session.Close()
	}
	fmt.Println("open")
	_, _ = os.Stdin.Read(make([]byte, 1))
	return nil
}

// scriptOp is one operation of `mcpload script`.
type scriptOp struct {
	Op        string         `json:"op"`
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

func script(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("script: the operations (a JSON list) come last")
	}
	o, err := parseOptions("script", args[:len(args)-1])
	if err != nil {
		return err
	}
	var ops []scriptOp
	if err := json.Unmarshal([]byte(args[len(args)-1]), &ops); err != nil {
		return fmt.Errorf("script: the operations: %v", err)
	}
	ctx := context.Background()
	session, err := connect(ctx, o.targets[0])
	if err != nil {
		return err
	}
	defer session.Close()
	instructions := ""
	if init := session.InitializeResult(); init != nil {
		instructions = init.Instructions
	}
	var results []any
	for _, op := range ops {
		switch op.Op {
		case "tools":
			var names []string
			for tool, err := range session.Tools(ctx, nil) {
				if err != nil {
					return fmt.Errorf("tools/list: %w", err)
				}
				names = append(names, tool.Name)
			}
			results = append(results, map[string]any{"tools": names})
		case "call":
			result, err := session.CallTool(ctx, &mcp.CallToolParams{Name: op.Name, Arguments: op.Arguments})
			if err != nil {
				results = append(results, map[string]any{"error": err.Error()})
				continue
			}
			text := ""
			for _, content := range result.Content {
				if t, ok := content.(*mcp.TextContent); ok {
					text += t.Text
				}
			}
			results = append(results, map[string]any{"isError": result.IsError,
				"structuredContent": result.StructuredContent, "text": text})
		default:
			return fmt.Errorf("script: unknown op %q: tools or call", op.Op)
		}
	}
	out, err := json.Marshal(map[string]any{"instructions": instructions, "results": results})
	if err != nil {
		return err
	}
	fmt.Println(string(out))
	return nil
}
