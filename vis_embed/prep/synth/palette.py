"""The vocabulary of identity parameters: object colours and their hue neighbours, shapes,
patterns, textures, the figure's and the vehicle's colours, background colours (names -> RGB).
The samplers draw names from it; the renderers turn names into pixels."""

from __future__ import annotations

# Saturated object colours; neighbours (for near-identity look-alikes) are adjacent hues.
OBJECT_COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35), "orange": (245, 140, 20), "yellow": (240, 215, 30),
    "green": (40, 165, 60), "cyan": (40, 200, 215), "blue": (35, 75, 215),
    "purple": (135, 55, 195), "pink": (245, 125, 190), "white": (245, 245, 240),
    "black": (25, 25, 30),
}
COLOUR_NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "red": ("orange", "pink"), "orange": ("red", "yellow"), "yellow": ("orange", "white"),
    "green": ("cyan", "yellow"), "cyan": ("green", "blue"), "blue": ("cyan", "purple"),
    "purple": ("blue", "pink"), "pink": ("purple", "red"), "white": ("yellow", "cyan"),
    "black": ("blue", "purple"),
}
# Muted background colours with names usable in edit instructions.
BACKGROUND_COLOURS: dict[str, tuple[int, int, int]] = {
    "green": (95, 140, 80), "blue": (80, 110, 170), "grey": (128, 128, 128),
    "brown": (130, 95, 60), "beige": (215, 200, 165), "teal": (60, 140, 140),
    "navy": (40, 50, 95), "olive": (128, 128, 60), "maroon": (120, 40, 50),
    "lavender": (180, 170, 210),
}
SHAPES: tuple[str, ...] = ("circle", "triangle", "square", "pentagon", "hexagon", "star",
                           "cross", "crescent", "ring", "heart")
SHAPE_NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "circle": ("hexagon", "ring"), "triangle": ("heart", "square"), "square": ("pentagon", "cross"),
    "pentagon": ("square", "hexagon"), "hexagon": ("pentagon", "circle"), "star": ("cross", "pentagon"),
    "cross": ("star", "square"), "crescent": ("circle", "heart"), "ring": ("circle", "crescent"),
    "heart": ("triangle", "crescent"),
}
PATTERNS: tuple[str, ...] = ("solid", "stripes", "checker", "halves", "quarters", "rings", "dots")
PATTERN_NEIGHBOURS: dict[str, tuple[str, ...]] = {
    "solid": ("dots",), "stripes": ("checker", "halves"), "checker": ("stripes", "quarters"),
    "halves": ("quarters", "stripes"), "quarters": ("halves", "checker"),
    "rings": ("dots", "stripes"), "dots": ("rings", "checker"),
}
TEXTURES: tuple[str, ...] = ("smooth", "speckled", "outlined")

SKIN_TONES: dict[str, tuple[int, int, int]] = {
    "light": (240, 205, 175), "tan": (205, 160, 115), "brown": (150, 100, 65), "dark": (95, 60, 40)}
HAIR_COLOURS: dict[str, tuple[int, int, int]] = {
    "black": (20, 20, 20), "brown": (95, 60, 30), "blond": (225, 195, 100), "grey": (170, 170, 170),
    "red": (170, 60, 25)}
TROUSER_COLOURS: dict[str, tuple[int, int, int]] = {
    "denim": (50, 75, 135), "black": (25, 25, 30), "grey": (120, 120, 125), "khaki": (190, 170, 120),
    "brown": (110, 75, 45), "white": (235, 235, 230), "green": (60, 100, 60), "red": (170, 35, 40)}
RIM_COLOURS: dict[str, tuple[int, int, int]] = {
    "silver": (195, 195, 200), "black": (30, 30, 30), "gold": (210, 170, 60), "red": (200, 40, 40)}
WINDOW_COLOURS: dict[str, tuple[int, int, int]] = {
    "clear": (170, 210, 235), "tinted": (55, 65, 80), "amber": (200, 150, 70)}
VEHICLE_BODIES: tuple[str, ...] = ("sedan", "hatchback", "van", "pickup", "bus")
