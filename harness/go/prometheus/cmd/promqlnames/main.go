// promqlnames parses PromQL expressions with Prometheus's own parser and prints, for
// each, the metric names it selects and the label names it matches, groups or joins
// on, so that tests can check dashboards, alert rules and documented queries against
// the series the agent exposes without a PromQL parser of their own.
//
// Input: a JSON array of expressions on stdin. Output: a JSON array of
// {"metrics": [...], "labels": [...]} in the same order, or an error naming the
// expression that does not parse (exit status 1).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type names struct {
	Metrics []string `json:"metrics"`
	Labels  []string `json:"labels"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "reading a JSON array of expressions:", err)
		os.Exit(2)
	}
	promql := parser.NewParser(parser.Options{})
	out := make([]names, 0, len(exprs))
	for _, text := range exprs {
		expr, err := promql.ParseExpr(text)
		if err != nil {
			fmt.Fprintf(os.Stderr, "%q: %v\n", text, err)
			os.Exit(1)
		}
		out = append(out, collect(expr))
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}

func collect(expr parser.Expr) names {
	metrics, found := map[string]bool{}, map[string]bool{}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			for _, m := range n.LabelMatchers {
				if m.Name == labels.MetricName {
					metrics[m.Value] = true
				} else {
					found[m.Name] = true
				}
			}
		case *parser.AggregateExpr:
			for _, l := range n.Grouping {
				found[l] = true
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				for _, l := range n.VectorMatching.MatchingLabels {
					found[l] = true
				}
				for _, l := range n.VectorMatching.Include {
					found[l] = true
				}
			}
		}
		return nil
	})
	return names{Metrics: sorted(metrics), Labels: sorted(found)}
}

func sorted(set map[string]bool) []string {
	list := make([]string, 0, len(set))
	for k := range set {
		list = append(list, k)
	}
	slices.Sort(list)
	return list
}
