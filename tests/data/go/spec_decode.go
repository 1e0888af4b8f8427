// spec_decode reads spec files the way runc does and prints what Go's
// decoder made of their process, for gpu-guard's differential test
// (tests/spec_go_decoder.rs builds it with `go build` at test time).
//
// runc reads config.json with json.NewDecoder(f).Decode(&spec) (runc
// spec.go loadSpec) and exec's --process file the same way into a
// specs.Process (runc exec.go getProcess). The types below are the subset
// of opencontainers/runtime-spec specs-go/config.go that holds the process,
// written out here so that the program needs only the standard library:
// Process11 as runc 1.1 builds it (runc go.mod: runtime-spec 1c3f411f0417;
// Debian's runc 1.1.5 builds with 5cfc4c3, the same Process), Process13
// with the fields runtime-spec added up to v1.3.0 (scheduler, ioPriority,
// execCPUAffinity).
//
// Usage: spec_decode spec|process FILE...
// Prints one JSON line per file:
//
//	{"file": F, "v11": {"error": E or null, "process": P}, "v13": {...}}
//
// where P is the decoded process marshalled back to JSON (null when the
// spec has none).
package main

import (
	"encoding/json"
	"fmt"
	"os"
)

type Box struct {
	Height uint `json:"height"`
	Width  uint `json:"width"`
}

type User struct {
	UID            uint32   `json:"uid"`
	GID            uint32   `json:"gid"`
	Umask          *uint32  `json:"umask,omitempty"`
	AdditionalGids []uint32 `json:"additionalGids,omitempty"`
	Username       string   `json:"username,omitempty"`
}

type LinuxCapabilities struct {
	Bounding    []string `json:"bounding,omitempty"`
	Effective   []string `json:"effective,omitempty"`
	Inheritable []string `json:"inheritable,omitempty"`
	Permitted   []string `json:"permitted,omitempty"`
	Ambient     []string `json:"ambient,omitempty"`
}

type POSIXRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type Process11 struct {
	Terminal        bool               `json:"terminal,omitempty"`
	ConsoleSize     *Box               `json:"consoleSize,omitempty"`
	User            User               `json:"user"`
	Args            []string           `json:"args,omitempty"`
	CommandLine     string             `json:"commandLine,omitempty"`
	Env             []string           `json:"env,omitempty"`
	Cwd             string             `json:"cwd"`
	Capabilities    *LinuxCapabilities `json:"capabilities,omitempty"`
	Rlimits         []POSIXRlimit      `json:"rlimits,omitempty"`
	NoNewPrivileges bool               `json:"noNewPrivileges,omitempty"`
	ApparmorProfile string             `json:"apparmorProfile,omitempty"`
	OOMScoreAdj     *int               `json:"oomScoreAdj,omitempty"`
	SelinuxLabel    string             `json:"selinuxLabel,omitempty"`
}

type LinuxSchedulerPolicy string
type LinuxSchedulerFlag string

type Scheduler struct {
	Policy   LinuxSchedulerPolicy `json:"policy"`
	Nice     int32                `json:"nice,omitempty"`
	Priority int32                `json:"priority,omitempty"`
	Flags    []LinuxSchedulerFlag `json:"flags,omitempty"`
	Runtime  uint64               `json:"runtime,omitempty"`
	Deadline uint64               `json:"deadline,omitempty"`
	Period   uint64               `json:"period,omitempty"`
}

type IOPriorityClass string

type LinuxIOPriority struct {
	Class    IOPriorityClass `json:"class"`
	Priority int             `json:"priority"`
}

type CPUAffinity struct {
	Initial string `json:"initial,omitempty"`
	Final   string `json:"final,omitempty"`
}

type Process13 struct {
	Terminal        bool               `json:"terminal,omitempty"`
	ConsoleSize     *Box               `json:"consoleSize,omitempty"`
	User            User               `json:"user"`
	Args            []string           `json:"args,omitempty"`
	CommandLine     string             `json:"commandLine,omitempty"`
	Env             []string           `json:"env,omitempty"`
	Cwd             string             `json:"cwd"`
	Capabilities    *LinuxCapabilities `json:"capabilities,omitempty"`
	Rlimits         []POSIXRlimit      `json:"rlimits,omitempty"`
	NoNewPrivileges bool               `json:"noNewPrivileges,omitempty"`
	ApparmorProfile string             `json:"apparmorProfile,omitempty"`
	OOMScoreAdj     *int               `json:"oomScoreAdj,omitempty"`
	Scheduler       *Scheduler         `json:"scheduler,omitempty"`
	SelinuxLabel    string             `json:"selinuxLabel,omitempty"`
	IOPriority      *LinuxIOPriority   `json:"ioPriority,omitempty"`
	ExecCPUAffinity *CPUAffinity       `json:"execCPUAffinity,omitempty"`
}

type Spec11 struct {
	Process *Process11 `json:"process,omitempty"`
}

type Spec13 struct {
	Process *Process13 `json:"process,omitempty"`
}

type Result struct {
	Error   *string     `json:"error"`
	Process interface{} `json:"process"`
}

// decode reads path into v as runc does and returns the error, if any.
func decode(path string, v interface{}) *string {
	f, err := os.Open(path)
	if err != nil {
		s := err.Error()
		return &s
	}
	defer f.Close()
	if err := json.NewDecoder(f).Decode(v); err != nil {
		s := err.Error()
		return &s
	}
	return nil
}

func main() {
	if len(os.Args) < 3 || (os.Args[1] != "spec" && os.Args[1] != "process") {
		fmt.Fprintln(os.Stderr, "usage: spec_decode spec|process FILE...")
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for _, path := range os.Args[2:] {
		var r11, r13 Result
		if os.Args[1] == "spec" {
			var s11 Spec11
			var s13 Spec13
			r11.Error = decode(path, &s11)
			r13.Error = decode(path, &s13)
			r11.Process = s11.Process
			r13.Process = s13.Process
		} else {
			var p11 Process11
			var p13 Process13
			r11.Error = decode(path, &p11)
			r13.Error = decode(path, &p13)
			r11.Process = p11
			r13.Process = p13
		}
		line := map[string]interface{}{"file": path, "v11": r11, "v13": r13}
		if err := out.Encode(line); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
