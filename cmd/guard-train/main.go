// Command guard-train trains Warden's prompt-injection and jailbreak
// classifier (internal/guard/inject) on the train split of the guard corpus
// and writes the model file that is embedded in the binaries:
//
//	go run ./cmd/guard-train -out internal/guard/inject/model.bin
//
// Training is deterministic: the same data and flags give the same bytes.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/warden-sandbox/warden/internal/guard/inject"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "guard-train:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := inject.DefaultTrainConfig()
	data := flag.String("data", "internal/guard/inject/testdata/injection_public.jsonl.gz,internal/guard/inject/testdata/injection_synthetic.jsonl.gz,internal/guard/inject/testdata/benign_requests.jsonl.gz",
		"comma-separated JSONL files (optionally .gz) with text, label (benign|injection|jailbreak) and split")
	out := flag.String("out", "internal/guard/inject/model.bin", "model file to write")
	split := flag.String("split", cfg.Split, "split to train on (never dev)")
	bits := flag.Uint("bits", uint(cfg.Bits), "log2 of the number of hash buckets")
	epochs := flag.Int("epochs", cfg.Epochs, "training epochs")
	lr := flag.Float64("lr", cfg.LR, "AdaGrad learning rate")
	l2 := flag.Float64("l2", cfg.L2, "L2 regularisation")
	seed := flag.Uint64("seed", cfg.Seed, "random seed (shuffling, folds)")
	folds := flag.Int("folds", cfg.Folds, "cross-validation folds for the threshold")
	maxFPR := flag.Float64("max-fpr", cfg.MaxFPR, "largest cross-validated false-positive rate on benign training texts")
	flag.Parse()
	if *split == "dev" {
		return fmt.Errorf("refusing to train on the dev split: it is for evaluation")
	}
	cfg.Split, cfg.Bits, cfg.Epochs, cfg.LR, cfg.L2 = *split, uint8(*bits), *epochs, *lr, *l2
	cfg.Seed, cfg.Folds, cfg.MaxFPR = *seed, *folds, *maxFPR

	var examples []inject.Example
	for _, path := range strings.Split(*data, ",") {
		ex, err := inject.ReadExamples(path, *split)
		if err != nil {
			return err
		}
		examples = append(examples, ex...)
		cfg.Data = append(cfg.Data, filepath.Base(path))
	}
	m, rep, err := inject.Train(examples, cfg)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := m.Write(&buf); err != nil {
		return err
	}
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write model: %w", err)
	}
	if err := os.Rename(tmp, *out); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write model: %w", err)
	}
	fmt.Printf("trained on %d examples (%s split); threshold %.4f: cross-validated FPR %.4f, recall %.4f; wrote %s (%d bytes)\n",
		len(examples), *split, rep.Threshold, rep.CVFPR, rep.CVRecall, *out, buf.Len())
	return nil
}
