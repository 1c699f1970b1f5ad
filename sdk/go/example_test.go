package warden_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// Create a sandbox, run a command in it, and kill it.
func Example() {
	ctx := context.Background()
	c, err := warden.New() // WARDEN_URL and WARDEN_API_KEY, or the defaults
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, warden.CreateSandboxRequest{Template: "base", TimeoutSeconds: 600})
	if err != nil {
		log.Fatal(err)
	}
	defer c.KillSandbox(ctx, sb.ID)

	res, err := c.Exec(ctx, sb.ID,
		warden.ExecRequest{Command: "wc -c"},
		warden.ExecIO{Stdin: strings.NewReader("hello"), Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit code:", res.ExitCode)
}

func ExampleClient_StartProcess() {
	ctx := context.Background()
	c, err := warden.New(warden.WithBaseURL(warden.DefaultSocketURL))
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.StartProcess(ctx, "sb-123", warden.ExecRequest{Cmd: []string{"python3", "-m", "http.server"}, Tag: "web"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close() // the server keeps running after the stream is closed
	for ev, err := range s.Events() {
		if err != nil {
			log.Fatal(err)
		}
		if ev.Type == warden.EventStderr {
			fmt.Printf("pid %d: %s", s.PID(), ev.Data)
		}
	}
}

func ExampleClient_WriteFile() {
	ctx := context.Background()
	c, err := warden.New()
	if err != nil {
		log.Fatal(err)
	}
	e, err := c.WriteFile(ctx, "sb-123", "/home/user/hello.txt", strings.NewReader("hi\n"), warden.WriteOptions{Mode: 0o600})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.Path, e.Size)
}

func ExampleIsNotFound() {
	ctx := context.Background()
	c, err := warden.New()
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.GetSandbox(ctx, "sb-gone")
	switch {
	case warden.IsNotFound(err):
		fmt.Println("no such sandbox")
	case err != nil:
		log.Fatal(err)
	}
}

func ExampleClient_AllSandboxes() {
	ctx := context.Background()
	c, err := warden.New()
	if err != nil {
		log.Fatal(err)
	}
	for sb, err := range c.AllSandboxes(ctx, warden.ListOptions{State: warden.StateRunning}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(sb.ID, sb.ExpiresAt)
	}
}
