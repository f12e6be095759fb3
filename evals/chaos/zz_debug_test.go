package chaos

import "testing"

func TestZZDebug(t *testing.T) {
	w := NewWorld(WorldConfig{Seed: 2})
	for n := 1; n <= 3; n++ {
		t.Logf("lead n=%d %+v", n, w.fateOf("p21-e0", "leads/lead.c1.r21@example.test", n, true))
		t.Logf("search n=%d %+v", n, w.fateOf("p21-e0", "search/dk1_c90a0070e72b1ee26761f0359a08d5c3bd909fd8259e5b2bf70d547755e1c40b", n, false))
	}
	for n := 1; n <= 3; n++ {
		t.Logf("lead35 n=%d %+v", n, w.fateOf("p35-e0", "leads/lead.c2.r35@example.test", n, true))
	}
}

func TestZZKills(t *testing.T) {
	ids := []string{"c1_contact", "c1_lead", "c1_charge1", "c1_settings", "c1_welcome"}
	for s := 0; s < 6; s++ {
		t.Logf("step %d %v", s, killFor(2, 21, s, ids))
	}
}

func TestZZKills35(t *testing.T) {
	ids := []string{"c1_item","c1_contact","c1_charge1","c1_settings","c1_welcome","c1_receipt","c2_contact","c2_lead","c2_charge1","c2_charge2","c2_settings","c2_welcome","c2_receipt"}
	for s := 0; s < 6; s++ {
		t.Logf("step %d %v", s, killFor(2, 35, s, ids))
	}
}
