// Command go-flags parses command lines with Go's own flag package, as the Go kubelet-csr-approver
// does, and prints what it read, so tests can compare another parser's reading of the same
// arguments with Go's.
//
// Protocol: every stdin line is one JSON object naming the flags to declare and the arguments:
//
//	{"strings":["provider-regex"],"bools":["bypass-dns-resolution"],"args":["-provider-regex","x"]}
//
// For every line one JSON object line goes to stdout, flushed at once:
//
//	{"ok":true,"values":{"provider-regex":"x"},"rest":[]}
//	{"ok":false,"error":"..."}
//
// "values" holds the flags the arguments set (flag.Visit), a string flag as given and a boolean
// as strconv.FormatBool writes it (its value went through strconv.ParseBool); "rest" holds the
// arguments left after flag parsing stopped. Flags are parsed by a fresh flag.FlagSet with
// ContinueOnError, as flag.Parse would parse os.Args[1:].
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"io"
	"os"
)

type request struct {
	Strings []string `json:"strings"`
	Bools   []string `json:"bools"`
	Args    []string `json:"args"`
}

type answer struct {
	OK     bool              `json:"ok"`
	Values map[string]string `json:"values,omitempty"`
	Rest   []string          `json:"rest,omitempty"`
	Error  string            `json:"error,omitempty"`
}

func parse(line []byte) answer {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return answer{Error: "input: " + err.Error()}
	}
	set := flag.NewFlagSet("go-flags", flag.ContinueOnError)
	set.SetOutput(io.Discard)
	for _, name := range req.Strings {
		set.String(name, "", "")
	}
	for _, name := range req.Bools {
		set.Bool(name, false, "")
	}
	if err := set.Parse(req.Args); err != nil {
		return answer{Error: err.Error()}
	}
	values := map[string]string{}
	set.Visit(func(f *flag.Flag) { values[f.Name] = f.Value.String() })
	return answer{OK: true, Values: values, Rest: set.Args()}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)
	for in.Scan() {
		if err := encoder.Encode(parse(in.Bytes())); err != nil {
			os.Exit(1)
		}
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}
	if in.Err() != nil {
		os.Exit(1)
	}
}
