package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/combo-service/combo-service/window"
)

type user struct {
	ID   int64
	Nick string
}

type item struct {
	ID   int64
	Type string // the combo key part: clicks of one item_type merge
	Name string
}

// click is one tap on the support page, at an offset from the start.
type click struct {
	At       time.Duration
	Activity int64
	User     user
	Item     item
	Qty      int32
	// Note, if set, is narration printed just before the click.
	Note string
}

var (
	xiaoming = user{ID: 10001, Nick: "小明"}
	xiaohong = user{ID: 10002, Nick: "小红"}
	aqiang   = user{ID: 10003, Nick: "阿强"}
	lucy     = user{ID: 10004, Nick: "Lucy"}

	fireworks = item{ID: 1, Type: "fireworks", Name: "烟花"}
	heart     = item{ID: 2, Type: "heart", Name: "小心心"}
	rocket    = item{ID: 3, Type: "rocket", Name: "火箭"}
	glowstick = item{ID: 4, Type: "glowstick", Name: "荧光棒"}

	allUsers = []user{xiaoming, xiaohong, aqiang, lucy}
	allItems = []item{fireworks, heart, rocket, glowstick}
)

// scripted is the default scenario: about 4 W of clicks (12 s at W = 3 s),
// written in seconds for W = 3 s and scaled to the window given. It shows a
// burst merging, switching items (separate windows) and back (same window),
// a big single gift, the same user in a second activity (never merged), the
// window anchored at its first click (a click 3.1 s after it opens a new
// window though the previous click was 1.2 s before), and a long pause.
// grace is the service's window.grace: it is not scaled with W, so only
// for W large enough does the pause outlast every window's push.
func scripted(a1, a2 int64, w, grace time.Duration) []click {
	at := func(sec float64) time.Duration { return time.Duration(sec / 3 * float64(w)) }
	c := func(sec float64, act int64, u user, it item, q int32) click {
		return click{At: at(sec), Activity: act, User: u, Item: it, Qty: q}
	}
	s := []click{
		c(0.0, a1, xiaoming, fireworks, 1),
		c(0.4, a1, xiaoming, fireworks, 1),
		c(0.7, a1, xiaohong, heart, 1),
		c(0.8, a1, xiaoming, fireworks, 1),
		c(1.1, a1, xiaohong, heart, 1),
		c(1.4, a1, xiaoming, rocket, 1), // switches item: a window of its own
		c(1.6, a1, xiaohong, heart, 10), // one click of ×10
		c(1.9, a1, xiaoming, fireworks, 1),
		c(2.2, a2, aqiang, glowstick, 1),
		c(2.5, a2, xiaoming, fireworks, 1), // same user and item, other activity
		c(2.6, a2, aqiang, glowstick, 1),
		c(3.1, a1, xiaoming, fireworks, 1), // 3.1 s after the window opened: a new one
		c(3.4, a1, xiaoming, fireworks, 1),
		c(3.8, a1, lucy, heart, 1),
		c(4.1, a1, lucy, heart, 1),
		c(4.4, a1, lucy, heart, 1),
		c(4.6, a2, aqiang, glowstick, 1),
		// pause, longer than W: every key's next click opens a new window
		c(8.6, a1, xiaoming, fireworks, 1),
		c(8.9, a1, xiaoming, fireworks, 1),
		c(9.1, a1, xiaohong, rocket, 1),
		c(9.2, a1, xiaoming, fireworks, 1),
		c(9.5, a1, xiaoming, fireworks, 1),
		c(10.0, a2, aqiang, glowstick, 5),
		c(10.6, a1, lucy, heart, 2),
		c(11.2, a1, xiaoming, rocket, 1),
		c(11.5, a1, xiaoming, rocket, 1),
		c(11.8, a1, lucy, heart, 1),
	}
	s[0].Note = "小明 taps 烟花 three times in a row"
	s[5].Note = "小明 switches to 火箭: another combo key, another window"
	s[7].Note = "back to 烟花 within W of its first tap: same window"
	s[9].Note = fmt.Sprintf("小明 in activity %d: activities never merge", a2)
	s[11].Note = fmt.Sprintf("%s after 小明's first 烟花 (W is anchored there): a new window", at(3.1).Round(10*time.Millisecond))
	pause := at(4).Round(10 * time.Millisecond)
	s[17].Note = fmt.Sprintf("after a %s pause, longer than W, every key's next tap opens a new window", pause)
	if pushedBefore(s[:17], w, grace, s[17].At) {
		s[17].Note = fmt.Sprintf("after a %s pause every window should have closed and been pushed", pause)
	}
	return s
}

// pushedBefore says whether every window of clicks is due for its push by
// t under normal load: W + grace + 100 ms (the contract's bound) after it
// opened.
func pushedBefore(clicks []click, w, grace, t time.Duration) bool {
	rows := make([]window.Row, len(clicks))
	for i, k := range clicks {
		rows[i] = window.Row{ID: int64(i + 1), ActivityID: k.Activity, UserID: k.User.ID, ItemType: k.Item.Type,
			Quantity: k.Qty, CreatedAt: k.At.Milliseconds()}
	}
	for _, m := range window.Merge(rows, w) {
		if time.Duration(m.CreatedAt)*time.Millisecond+w+grace+100*time.Millisecond > t {
			return false
		}
	}
	return true
}

// random is a seeded random scenario lasting about d: each user taps bursts
// of one item, sometimes switches item, and sometimes pauses for longer
// than W; a fifth of the taps go to the second activity.
func random(a1, a2 int64, w, d time.Duration, seed uint64) []click {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r.Int64N(int64(hi-lo)+1)) }
	var s []click
	for _, u := range allUsers {
		t := between(0, time.Second)
		it := allItems[r.IntN(len(allItems))]
		for t < d {
			act := a1
			if r.IntN(5) == 0 {
				act = a2
			}
			for range 1 + r.IntN(4) {
				if t >= d {
					break
				}
				q := int32(1)
				if r.IntN(8) == 0 {
					q = int32(2 + r.IntN(9))
				}
				s = append(s, click{At: t, Activity: act, User: u, Item: it, Qty: q})
				t += between(150*time.Millisecond, 700*time.Millisecond)
			}
			if r.IntN(3) == 0 {
				t += between(w+w/10, w+w/2) // crosses a window boundary
			} else {
				t += between(300*time.Millisecond, 1200*time.Millisecond)
			}
			if r.IntN(2) == 0 {
				it = allItems[r.IntN(len(allItems))]
			}
		}
	}
	slices.SortStableFunc(s, func(a, b click) int { return int(a.At - b.At) })
	return s
}
