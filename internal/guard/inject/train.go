package inject

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Example is one labelled text of the guard corpus
// (../shared/data/guard/injection_*.jsonl; a copy is in testdata).
type Example struct {
	Text   string `json:"text"`
	Label  string `json:"label"`
	Kind   string `json:"kind"`
	Source string `json:"source"`
	Split  string `json:"split"`
}

// ReadExamples reads a JSONL file (gzip-compressed when its name ends in
// .gz) and returns the rows of the given split ("" for all).
func ReadExamples(path, split string) ([]Example, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read examples: %w", err)
	}
	defer f.Close()
	var r io.Reader = f
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("read examples %s: %w", path, err)
		}
		defer zr.Close()
		r = zr
	}
	var out []Example
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var ex Example
		if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
			return nil, fmt.Errorf("read examples %s:%d: %w", path, line, err)
		}
		if classIndex(ex.Label) < 0 {
			return nil, fmt.Errorf("read examples %s:%d: unknown label %q", path, line, ex.Label)
		}
		if split == "" || ex.Split == split {
			out = append(out, ex)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read examples %s: %w", path, err)
	}
	return out, nil
}

func classIndex(label string) int {
	for i, c := range classes {
		if c == label {
			return i
		}
	}
	return -1
}

// TrainConfig holds the training settings; DefaultTrainConfig gives the ones
// the committed model was trained with.
type TrainConfig struct {
	Bits      uint8
	CharMin   uint8
	CharMax   uint8
	WordGrams uint8
	Window    int
	Stride    int
	Epochs    int
	LR        float64 // AdaGrad step
	L2        float64
	Seed      uint64
	// Folds for choosing the threshold by cross-validation (>= 2).
	Folds int
	// MaxFPR is the largest out-of-fold false-positive rate on benign
	// training texts the threshold may give.
	MaxFPR float64
	// Data and Split are recorded in the model.
	Data  []string
	Split string
}

// DefaultTrainConfig returns the settings of the committed model.
func DefaultTrainConfig() TrainConfig {
	return TrainConfig{
		Bits: 18, CharMin: 2, CharMax: 4, WordGrams: 2,
		Window: 1024, Stride: 512,
		Epochs: 8, LR: 0.5, L2: 1e-6, Seed: 20250301,
		Folds: 5, MaxFPR: 0.02,
		Split: "train",
	}
}

// TrainReport summarises cross-validation.
type TrainReport struct {
	Threshold float64
	CVFPR     float64
	CVRecall  float64
}

// sparse is one example's features: unique buckets and their values.
type sparse struct {
	idx   []uint32
	val   []float32
	class int
}

func toSparse(feats []uint32, class int) sparse {
	s := slices.Clone(feats)
	slices.Sort(s)
	scale := float32(1 / math.Sqrt(float64(max(1, len(s)))))
	var sp sparse
	sp.class = class
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && s[j] == s[i] {
			j++
		}
		sp.idx = append(sp.idx, s[i])
		sp.val = append(sp.val, float32(j-i)*scale)
		i = j
	}
	return sp
}

// Train trains a model on examples: the threshold is chosen by k-fold
// cross-validation, then the final model is trained on all of them. The
// result depends only on the examples (in order) and cfg.
func Train(examples []Example, cfg TrainConfig) (*Model, TrainReport, error) {
	if len(examples) == 0 {
		return nil, TrainReport{}, errors.New("train: no examples")
	}
	if cfg.Folds < 2 || cfg.Epochs < 1 || cfg.Bits < 8 || cfg.Bits > 24 || cfg.MaxFPR <= 0 || cfg.MaxFPR >= 1 ||
		cfg.Window < 0 || cfg.Window > 0 && (cfg.Stride <= 0 || cfg.Window%cfg.Stride != 0) {
		return nil, TrainReport{}, errors.New("train: bad configuration")
	}
	h := header{
		Bits: cfg.Bits, CharMin: cfg.CharMin, CharMax: cfg.CharMax, WordGrams: cfg.WordGrams,
		Window: cfg.Window, Stride: cfg.Stride,
	}
	spec := h.spec()
	e := newExtractor(spec)
	data := make([]sparse, len(examples))
	for i, ex := range examples {
		c := classIndex(ex.Label)
		if c < 0 {
			return nil, TrainReport{}, fmt.Errorf("train: unknown label %q", ex.Label)
		}
		data[i] = toSparse(e.features(ex.Text), c)
	}

	// Folds by a hash of the text, so that they do not depend on row order.
	fold := make([]int, len(examples))
	for i, ex := range examples {
		fold[i] = int(hashString(cfg.Seed, ex.Text) % uint64(cfg.Folds))
	}
	oof := make([]float64, len(examples))
	var wg sync.WaitGroup
	for k := range cfg.Folds {
		wg.Go(func() {
			var tr []sparse
			for i := range data {
				if fold[i] != k {
					tr = append(tr, data[i])
				}
			}
			m := fit(tr, h, cfg, cfg.Seed+uint64(k)+1)
			m.h.Threshold = 2 // never an attack: Score only fills probabilities
			for i, ex := range examples {
				if fold[i] == k {
					oof[i] = m.Score(ex.Text).Attack
				}
			}
		})
	}
	wg.Wait()

	var benign, attack []float64
	for i, ex := range examples {
		if ex.Label == LabelBenign {
			benign = append(benign, oof[i])
		} else {
			attack = append(attack, oof[i])
		}
	}
	if len(benign) == 0 || len(attack) == 0 {
		return nil, TrainReport{}, errors.New("train: need benign and attack examples")
	}
	thr := chooseThreshold(benign, cfg.MaxFPR)
	rep := TrainReport{Threshold: thr, CVFPR: rateAtLeast(benign, thr), CVRecall: rateAtLeast(attack, thr)}

	m := fit(data, h, cfg, cfg.Seed)
	m.h.Threshold = thr
	m.h.Training = TrainInfo{
		Data: cfg.Data, Split: cfg.Split, Examples: len(examples), Epochs: cfg.Epochs, LR: cfg.LR, L2: cfg.L2,
		Seed: cfg.Seed, Folds: cfg.Folds, MaxFPR: cfg.MaxFPR, CVFPR: rep.CVFPR, CVRecall: rep.CVRecall,
	}
	return m, rep, nil
}

// chooseThreshold returns the lowest threshold whose false-positive rate on
// the benign scores is at most maxFPR: just above the benign score that must
// be let through.
func chooseThreshold(benign []float64, maxFPR float64) float64 {
	s := slices.Clone(benign)
	sort.Float64s(s)
	allowed := int(math.Floor(maxFPR * float64(len(s)))) // benign texts allowed at or above
	// Scores strictly above s[k] flag at most len(s)-1-k benign texts.
	k := len(s) - 1 - allowed
	if k < 0 {
		return 0
	}
	return min(math.Nextafter(s[k], 2), 1)
}

func rateAtLeast(scores []float64, thr float64) float64 {
	n := 0
	for _, s := range scores {
		if s >= thr {
			n++
		}
	}
	return float64(n) / float64(len(scores))
}

// fit trains multinomial logistic regression with AdaGrad, visiting the
// examples in an order shuffled by seed each epoch.
func fit(data []sparse, h header, cfg TrainConfig, seed uint64) *Model {
	n := (1 << h.Bits) * numClasses
	w := make([]float32, n)
	g2 := make([]float32, n)
	var bias [numClasses]float32
	var bg2 [numClasses]float32
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	order := make([]int, len(data))
	for i := range order {
		order[i] = i
	}
	lr := float32(cfg.LR)
	l2 := float32(cfg.L2)
	const eps = 1e-8
	for range cfg.Epochs {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			ex := &data[i]
			var z [numClasses]float64
			for j, f := range ex.idx {
				v := ex.val[j]
				ww := w[int(f)*numClasses : int(f)*numClasses+numClasses]
				z[0] += float64(ww[0] * v)
				z[1] += float64(ww[1] * v)
				z[2] += float64(ww[2] * v)
			}
			for c := range z {
				z[c] += float64(bias[c])
			}
			p := softmax(z)
			var d [numClasses]float32
			for c := range d {
				d[c] = float32(p[c])
				if c == ex.class {
					d[c]--
				}
			}
			for j, f := range ex.idx {
				v := ex.val[j]
				base := int(f) * numClasses
				for c := range numClasses {
					g := d[c]*v + l2*w[base+c]
					g2[base+c] += g * g
					w[base+c] -= lr * g / float32(math.Sqrt(float64(g2[base+c])+eps))
				}
			}
			for c := range numClasses {
				g := d[c]
				bg2[c] += g * g
				bias[c] -= lr * g / float32(math.Sqrt(float64(bg2[c])+eps))
			}
		}
	}
	h.Bias = bias
	return &Model{h: h, spec: h.spec(), w: w}
}
