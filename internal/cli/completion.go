package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

func completionCmd() *command {
	c := &command{
		name:  "completion",
		args:  "bash|zsh|fish",
		short: "Print a shell completion script",
		long: "Print a script that completes warden's commands and flags, and sandbox IDs (from\n" +
			"'warden sandbox ls -q', run as you type) where a command takes one. Load it in your\n" +
			"shell's startup file.",
		examples: []string{
			"source <(warden completion bash)       # in ~/.bashrc",
			"source <(warden completion zsh)        # in ~/.zshrc",
			"warden completion fish > ~/.config/fish/completions/warden.fish",
		},
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one shell (bash, zsh or fish), got %d arguments", len(args))
		}
		root := c
		for root.parent != nil {
			root = root.parent
		}
		nodes := completionNodes(root)
		switch args[0] {
		case "bash":
			return writeBashCompletion(r.env.Stdout, nodes)
		case "zsh":
			// zsh runs the bash function through its bash-completion emulation.
			fmt.Fprintln(r.env.Stdout, "# zsh completion for warden: source <(warden completion zsh)")
			fmt.Fprintln(r.env.Stdout, "(( $+functions[compdef] )) || { autoload -U +X compinit && compinit }")
			fmt.Fprintln(r.env.Stdout, "autoload -U +X bashcompinit && bashcompinit")
			return writeBashCompletion(r.env.Stdout, nodes)
		case "fish":
			return writeFishCompletion(r.env.Stdout, nodes)
		}
		return usageErr(c, "unknown shell %q: want bash, zsh or fish", args[0])
	}
	return c
}

// compNode is one command of the tree as completion scripts see it.
type compNode struct {
	path    string   // "warden sandbox create"
	short   string   // one-line summary
	names   []string // name and aliases, as typed after the parent's path
	subs    []string // subcommand names and aliases
	flags   []string // "--name" and aliases, with "-x" for one-letter ones
	valueFl []string // the flags of flags that take a value
	// ids: which positional arguments are sandbox IDs: 0 none, 1 the first, -1 every one.
	ids int
}

// sandboxIDGroups are the top-level commands whose ID arguments are sandbox IDs.
var sandboxIDGroups = []string{"sandbox", "exec", "run", "contexts", "process", "fs"}

func completionNodes(root *command) []compNode {
	var out []compNode
	var walk func(c *command)
	walk = func(c *command) {
		n := compNode{path: c.path(), short: c.short, names: append([]string{c.name}, c.aliases...)}
		for _, s := range c.subs {
			n.subs = append(n.subs, s.name)
			n.subs = append(n.subs, s.aliases...)
		}
		if c.fs != nil {
			for _, f := range append(slices.Clone(c.fs.own), c.fs.globals...) {
				for _, name := range append([]string{f.name}, f.aliases...) {
					fl := "--" + name
					if len(name) == 1 {
						fl = "-" + name
					}
					n.flags = append(n.flags, fl)
					if f.arg != "" {
						n.valueFl = append(n.valueFl, fl)
					}
				}
			}
		}
		if top := strings.Fields(n.path); len(top) > 1 && slices.Contains(sandboxIDGroups, top[1]) && c.run != nil {
			switch {
			case strings.HasPrefix(c.args, "ID...") || strings.HasPrefix(c.args, "[ID...]"):
				n.ids = -1
			case strings.HasPrefix(c.args, "ID"):
				n.ids = 1
			}
		}
		out = append(out, n)
		for _, s := range c.subs {
			walk(s)
		}
	}
	walk(root)
	return out
}

// shellWords joins words for a single-quoted shell string (none contains a quote).
func shellWords(ws []string) string { return strings.Join(ws, " ") }

func writeBashCompletion(w io.Writer, nodes []compNode) error {
	var b strings.Builder
	b.WriteString(`# bash completion for warden: source <(warden completion bash)
_warden() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" path="warden" w i npos=0 skip=0
    local subs="" flags="" vflags="" ids=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        w="${COMP_WORDS[i]}"
        if ((skip)); then skip=0; continue; fi
        _warden_node "$path"
        case "$w" in
        --) break ;;
        --*=*) continue ;;
        -*)
            [[ " $vflags " == *" $w "* ]] && skip=1
            continue
            ;;
        esac
        if [[ -n "$subs" && " $subs " == *" $w "* ]]; then
            path="$(_warden_canon "$path" "$w")"
        else
            npos=$((npos + 1))
        fi
    done
    _warden_node "$path"
    if ((skip)); then
        COMPREPLY=()
        return
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
        return
    fi
    if [[ -n "$subs" ]]; then
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
        return
    fi
    if ((ids == -1 || (ids == 1 && npos == 0))); then
        COMPREPLY=($(compgen -W "$(warden sandbox ls -q 2>/dev/null)" -- "$cur"))
        return
    fi
    COMPREPLY=($(compgen -f -- "$cur"))
}

# _warden_canon PATH WORD: the path of PATH's subcommand WORD (aliases resolved).
_warden_canon() {
    case "$1 $2" in
`)
	for _, n := range nodes {
		parent, _, ok := cutLast(n.path)
		if !ok {
			continue
		}
		var pats []string
		for _, name := range n.names {
			pats = append(pats, fmt.Sprintf("%q", parent+" "+name))
		}
		fmt.Fprintf(&b, "    %s) echo %q ;;\n", strings.Join(pats, "|"), n.path)
	}
	b.WriteString(`    *) echo "$1" ;;
    esac
}

# _warden_node PATH: sets subs, flags, vflags and ids for the command PATH.
_warden_node() {
    case "$1" in
`)
	for _, n := range nodes {
		fmt.Fprintf(&b, "    %q) subs='%s' flags='%s' vflags='%s' ids=%d ;;\n",
			n.path, shellWords(n.subs), shellWords(n.flags), shellWords(n.valueFl), n.ids)
	}
	b.WriteString(`    *) subs="" flags="" vflags="" ids=0 ;;
    esac
}

complete -F _warden warden
`)
	_, err := io.WriteString(w, b.String())
	return err
}

func cutLast(path string) (parent, name string, ok bool) {
	i := strings.LastIndexByte(path, ' ')
	if i < 0 {
		return "", path, false
	}
	return path[:i], path[i+1:], true
}

func writeFishCompletion(w io.Writer, nodes []compNode) error {
	var b strings.Builder
	b.WriteString(`# fish completion for warden: warden completion fish > ~/.config/fish/completions/warden.fish
function __warden_path
    set -l words (commandline -opc)
    set -l path warden
    set -l skip 0
    for w in $words[2..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        if test "$w" = --
            break
        end
        if string match -q -- '-*' $w
            if contains -- $w (__warden_vflags $path)
                set skip 1
            end
            continue
        end
        set -l next (__warden_canon "$path $w")
        if test -n "$next"
            set path $next
        end
    end
    echo $path
end

function __warden_canon
    switch $argv[1]
`)
	for _, n := range nodes {
		parent, _, ok := cutLast(n.path)
		if !ok {
			continue
		}
		var pats []string
		for _, name := range n.names {
			pats = append(pats, "'"+parent+" "+name+"'")
		}
		fmt.Fprintf(&b, "        case %s\n            echo '%s'\n", strings.Join(pats, " "), n.path)
	}
	b.WriteString(`    end
end

function __warden_vflags
    switch $argv[1]
`)
	for _, n := range nodes {
		if len(n.valueFl) > 0 {
			fmt.Fprintf(&b, "        case '%s'\n            string split ' ' -- '%s'\n", n.path, shellWords(n.valueFl))
		}
	}
	b.WriteString(`    end
end

function __warden_positionals
    # How many positional arguments the current command has so far.
    set -l words (commandline -opc)
    set -l path (__warden_path)
    set -l n (count (string split ' ' -- $path))
    set -l pos 0
    set -l skip 0
    for w in $words[(math $n + 1)..-1]
        if test $skip = 1
            set skip 0
            continue
        end
        if string match -q -- '-*' $w
            if contains -- $w (__warden_vflags $path)
                set skip 1
            end
            continue
        end
        set pos (math $pos + 1)
    end
    echo $pos
end

complete -c warden -f
`)
	for _, n := range nodes {
		cond := fmt.Sprintf("test (__warden_path) = '%s'", n.path)
		if len(n.subs) > 0 {
			for _, s := range nodesUnder(nodes, n.path) {
				fmt.Fprintf(&b, "complete -c warden -n %q -a '%s' -d %q\n", cond, s.names[0], s.short)
			}
		}
		for _, f := range n.flags {
			var arg string
			if strings.HasPrefix(f, "--") {
				arg = "-l " + f[2:]
			} else {
				arg = "-s " + f[1:]
			}
			if slices.Contains(n.valueFl, f) {
				arg += " -r"
			}
			fmt.Fprintf(&b, "complete -c warden -n %q %s\n", cond, arg)
		}
		switch n.ids {
		case -1:
			fmt.Fprintf(&b, "complete -c warden -n %q -a '(warden sandbox ls -q 2>/dev/null)'\n", cond)
		case 1:
			fmt.Fprintf(&b, "complete -c warden -n %q -a '(warden sandbox ls -q 2>/dev/null)'\n",
				cond+"; and test (__warden_positionals) = 0")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// nodesUnder returns the direct subcommands of path.
func nodesUnder(nodes []compNode, path string) []compNode {
	var out []compNode
	for _, n := range nodes {
		if p, _, ok := cutLast(n.path); ok && p == path {
			out = append(out, n)
		}
	}
	return out
}
