package mcptool

import "testing"

// A misspelled tool name is answered with the listed name it is closest
// to, and only with a close one.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	listed := []string{"create_directory", "edit_file", "move_file", "read_file", "write_file"}
	for _, c := range []struct{ name, want string }{
		{"move_fiel", ` (did you mean "move_file"?)`}, // transposition
		{"mov_file", ` (did you mean "move_file"?)`},  // deletion
		{"Move_File", ` (did you mean "move_file"?)`}, // case
		{"rename", ""},
		{"delete_everything", ""},
		{"wirte_file", ` (did you mean "write_file"?)`},
	} {
		if got := didYouMean(c.name, listed); got != c.want {
			t.Errorf("didYouMean(%q) = %q, want %q", c.name, got, c.want)
		}
	}
	if d := editDistance("move_fiel", "move_file"); d != 1 {
		t.Errorf("editDistance(move_fiel, move_file) = %d, want 1", d)
	}
}
