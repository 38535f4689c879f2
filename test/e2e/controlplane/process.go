package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// spawner starts child processes from one goroutine locked to one OS thread
// that stays alive until close. Children get Pdeathsig=SIGKILL, which Linux
// delivers when the *thread* that forked them exits; keeping that thread
// alive makes the signal fire exactly when this whole process dies (for
// example when `go test -timeout` panics or a test panics), so etcd and
// kube-apiserver can never outlive the test binary.
type spawner struct {
	reqs chan spawnRequest
}

type spawnRequest struct {
	cmd  *exec.Cmd
	errc chan error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnRequest)}
	go func() {
		// Never unlocked: when this goroutine returns, the runtime ends the
		// thread, which SIGKILLs any child still alive (a backstop; close is
		// only called after the children were stopped).
		runtime.LockOSThread()
		for r := range s.reqs {
			r.errc <- r.cmd.Start()
		}
	}()
	return s
}

func (s *spawner) start(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	// A process group of its own: a terminal's Ctrl-C does not hit it
	// directly (we stop it in order), and stop can signal the whole group.
	cmd.SysProcAttr.Setpgid = true
	errc := make(chan error, 1)
	s.reqs <- spawnRequest{cmd: cmd, errc: errc}
	return <-errc
}

func (s *spawner) close() { close(s.reqs) }

// process is a running child with its output in a log file.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFrom int64         // size of logPath before this process wrote to it
	done    chan struct{} // closed when the process has exited and was reaped
	waitErr error         // valid after done is closed
}

// startProcess runs path with args, appending stdout and stderr to logPath.
func startProcess(sp *spawner, name, path string, args []string, env []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	logFrom, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("seek %s log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := sp.start(cmd); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, path, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFrom: logFrom, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signalGroup signals the process group unless the process was already
// reaped (its id may then belong to somebody else).
func (p *process) signalGroup(sig syscall.Signal) {
	if p.exited() {
		return
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(sig)
	}
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs and waits up to 10s
// more. It returns an error only if the process could not be ended.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	p.signalGroup(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	p.signalGroup(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// exitError describes how the process ended, with the end of its log.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited early (%v); last log lines from %s:\n%s", p.name, p.waitErr, p.logPath, p.logTail(40))
}

// logTail returns the last n lines of the process log.
func (p *process) logTail(n int) string {
	return fileTail(p.logPath, n)
}

// logContains reports whether this process (not an earlier attempt writing
// to the same log) logged s.
func (p *process) logContains(s string) bool {
	b, err := os.ReadFile(p.logPath)
	return err == nil && int64(len(b)) >= p.logFrom && bytes.Contains(b[p.logFrom:], []byte(s))
}

func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
