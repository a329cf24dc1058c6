// Command promql-series parses PromQL expressions with Prometheus's own parser and prints, for each, the
// queries that read its series: the expression itself, minus top-level comparisons with a scalar
// (`x > 0.1` reads x), split at top-level `and`, the left side of `unless`, and the union of the two sides of
// `or`. An alert that is not firing returns no series by design; its data queries must return some, or the
// alert could never fire.
//
// Input (stdin): a JSON list of {"name": ..., "expr": ...}. Output (stdout): a JSON list of
// {"name": ..., "expr": ..., "error": ..., "queries": [...]}. Exits 1 when any expression does not parse.
//
// Used by scripts/check-promql.py (the chart's dashboards and alerts) and e2e/scenarios/test_prometheus.py.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/prometheus/prometheus/promql/parser"
)

type query struct {
	Name    string   `json:"name"`
	Expr    string   `json:"expr"`
	Error   string   `json:"error,omitempty"`
	Queries []string `json:"queries,omitempty"`
}

// scalar: a number, or any expression of scalar type (`7 * 86400`, `time()`).
func scalar(e parser.Expr) bool {
	return e.Type() == parser.ValueTypeScalar
}

// dataQueries: the parts of e whose series e reads.
func dataQueries(e parser.Expr) []parser.Expr {
	switch n := e.(type) {
	case *parser.ParenExpr:
		return dataQueries(n.Expr)
	case *parser.BinaryExpr:
		switch n.Op {
		case parser.LAND:
			// Fires only where both sides have series: each must have some.
			return append(dataQueries(n.LHS), dataQueries(n.RHS)...)
		case parser.LUNLESS:
			// The right side only removes series; none there is normal.
			return dataQueries(n.LHS)
		case parser.LOR:
			// Either side may be empty (a failure counter not created yet): the union must not be.
			lhs, rhs := dataQueries(n.LHS), dataQueries(n.RHS)
			if len(lhs) != 1 || len(rhs) != 1 {
				return append(lhs, rhs...)
			}
			union := *n
			union.LHS, union.RHS = lhs[0], rhs[0]
			return []parser.Expr{&union}
		}
		if n.Op.IsComparisonOperator() && !n.ReturnBool {
			switch {
			case scalar(n.RHS) && !scalar(n.LHS):
				return dataQueries(n.LHS)
			case scalar(n.LHS) && !scalar(n.RHS):
				return dataQueries(n.RHS)
			}
		}
	}
	return []parser.Expr{e}
}

func main() {
	var queries []query
	if err := json.NewDecoder(os.Stdin).Decode(&queries); err != nil {
		fmt.Fprintf(os.Stderr, "promql-series: reading stdin: %v\n", err)
		os.Exit(2)
	}
	p := parser.NewParser(parser.Options{})
	failed := false
	for i := range queries {
		q := &queries[i]
		expr, err := p.ParseExpr(q.Expr)
		if err != nil {
			q.Error = err.Error()
			failed = true
			continue
		}
		for _, part := range dataQueries(expr) {
			q.Queries = append(q.Queries, part.String())
		}
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	out.SetEscapeHTML(false)
	if err := out.Encode(queries); err != nil {
		fmt.Fprintf(os.Stderr, "promql-series: %v\n", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}
