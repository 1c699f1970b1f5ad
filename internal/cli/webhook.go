package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

func webhookCmd() *command {
	return &command{
		name:    "webhook",
		aliases: []string{"webhooks"},
		short:   "Manage outgoing webhooks: create, ls, show, rm, test",
		long: "Manage the signed outgoing webhooks (docs/webhooks.md): endpoints that get the audit\n" +
			"events they name, added and removed at run time without a restart, next to those of\n" +
			"the config file (source config, read-only here). Needs webhooks:admin.",
		subs: []*command{webhookCreateCmd(), webhookLsCmd(), webhookShowCmd(), webhookRmCmd(), webhookTestCmd()},
	}
}

func webhookCreateCmd() *command {
	var (
		def              warden.WebhookWrite
		events, outcomes listFlag
		disabled         bool
	)
	c := &command{name: "create", args: "NAME URL", short: "Add an endpoint",
		long: "Add endpoint NAME: deliveries of the audit events --events names (types or globs such as\n" +
			"'sandbox.*'), written from now on, POSTed to URL (https) and signed with the key in\n" +
			"secret --secret (put it first: echo whsec_... | warden secret put NAME-webhook).",
		examples: []string{"warden webhook create soc https://hooks.example.com/warden --secret sec_01hzx... \\\n" +
			"    --events approval.request,sandbox.kill,llm.budget_exceeded --outcomes success,denied"},
		json: true}
	c.flags = func(fs *flagSet) {
		fs.String(&def.Secret, "secret", "ID", "ID of the secret holding the signing key")
		fs.Var(&events, "events", "TYPES", "event types or globs, comma-separated (required)")
		fs.Var(&outcomes, "outcomes", "LIST", "only events with these outcomes: success, denied, error")
		fs.Int(&def.MaxAttempts, "max-attempts", "N", "tries per event before it is given up on (default 12)")
		fs.Bool(&disabled, "disabled", "keep the endpoint without delivering")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 2 {
			return usageErr(c, "want NAME URL")
		}
		if def.Secret == "" || len(events) == 0 {
			return usageErr(c, "--secret and --events are required")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		def.Name, def.URL, def.Events, def.Outcomes = args[0], args[1], events, outcomes
		if disabled {
			f := false
			def.Enabled = &f
		}
		w, err := cl.CreateWebhook(ctx, def)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, w)
		}
		fmt.Fprintln(r.env.Stdout, w.Name)
		return nil
	}
	return c
}

func webhookLsCmd() *command {
	c := &command{name: "ls", aliases: []string{"list"}, short: "List endpoints with their delivery state",
		long: "List every endpoint, the config file's first: where it delivers, what, and how its\n" +
			"deliveries stand (delivered, given up, the last error).",
		json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 0 {
			return usageErr(c, "takes no arguments")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		ws, err := cl.ListWebhooks(ctx)
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, ws)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tSOURCE\tSTATE\tURL\tEVENTS\tDELIVERED\tGIVEN UP\tLAST ERROR")
		for _, w := range ws {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", w.Name, w.Source, webhookState(w), w.URL,
				strings.Join(w.Events, ","), w.Delivery.Delivered, w.Delivery.GivenUp, memoryLine(w.Delivery.LastError, 50))
		}
		return tw.Flush()
	}
	return c
}

func webhookState(w warden.Webhook) string {
	switch {
	case !w.Enabled:
		return "disabled"
	case w.Delivery.Attempts > 0:
		return fmt.Sprintf("retrying (%d)", w.Delivery.Attempts)
	case w.Delivery.Running:
		return "running"
	}
	return "stopped"
}

func webhookTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.DateTime)
}

func webhookShowCmd() *command {
	c := &command{name: "show", args: "NAME", short: "Show an endpoint and its delivery state",
		long: "Print endpoint NAME: where it delivers, what, and how its deliveries stand (the cursor,\n" +
			"events delivered and given up on, the last attempt and error).",
		examples: []string{"warden webhook show soc"}, json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one endpoint NAME")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		w, err := cl.GetWebhook(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, w)
		}
		d := w.Delivery
		outcomes := strings.Join(w.Outcomes, ",")
		if outcomes == "" {
			outcomes = "all"
		}
		fmt.Fprintf(r.env.Stdout, "name:           %s\nsource:         %s\nstate:          %s\nurl:            %s\n"+
			"secret:         %s\nevents:         %s\noutcomes:       %s\nmax attempts:   %d\n", w.Name, w.Source,
			webhookState(w), w.URL, w.Secret, strings.Join(w.Events, ","), outcomes, w.MaxAttempts)
		if w.CreatedBy != "" {
			fmt.Fprintf(r.env.Stdout, "created:        %s by %s\n", webhookTime(w.CreatedAt), w.CreatedBy)
		}
		fmt.Fprintf(r.env.Stdout, "cursor:         %d\ndelivered:      %d (last %s)\ngiven up:       %d\nlast attempt:   %s",
			d.Cursor, d.Delivered, webhookTime(d.LastDeliveredAt), d.GivenUp, webhookTime(d.LastAttemptAt))
		if d.LastStatus != 0 {
			fmt.Fprintf(r.env.Stdout, " (HTTP %d)", d.LastStatus)
		}
		fmt.Fprintln(r.env.Stdout)
		if d.Attempts > 0 {
			fmt.Fprintf(r.env.Stdout, "retrying:       attempt %d of %d\n", d.Attempts, w.MaxAttempts)
		}
		if d.LastError != "" {
			fmt.Fprintf(r.env.Stdout, "last error:     %s\n", d.LastError)
		}
		return nil
	}
	return c
}

func webhookRmCmd() *command {
	c := &command{name: "rm", aliases: []string{"delete"}, args: "NAME...", short: "Remove endpoints",
		long: "Stop and remove each endpoint NAME with its delivery state. The config file's endpoints\n" +
			"are removed there."}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) == 0 {
			return usageErr(c, "want at least one endpoint NAME")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var errs []error
		for _, n := range args {
			if err := cl.DeleteWebhook(ctx, n); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintln(r.env.Stdout, n)
		}
		return errors.Join(errs...)
	}
	return c
}

func webhookTestCmd() *command {
	c := &command{name: "test", args: "NAME", short: "Send a signed test ping to an endpoint",
		long: "Send one signed webhook.test delivery to NAME now and print what the receiver answered.\n" +
			"Exits 1 when it did not answer 2xx.",
		examples: []string{"warden webhook test soc"}, json: true}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one endpoint NAME")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		res, err := cl.TestWebhook(ctx, args[0])
		if err != nil {
			return err
		}
		if r.g.json {
			if err := printJSON(r.env.Stdout, res); err != nil {
				return err
			}
		} else if res.OK {
			fmt.Fprintf(r.env.Stdout, "ok: HTTP %d in %d ms (%s)\n", res.StatusCode, res.DurationMS, res.MessageID)
		} else {
			fmt.Fprintf(r.env.Stdout, "failed: %s (%s)\n", res.Error, res.MessageID)
		}
		if !res.OK {
			return exitCode(1)
		}
		return nil
	}
	return c
}
