"""Words for objects: names, common-sense descriptions, looks and colours.

Input: none (a static table). Output: :data:`LEX` (EB type -> :class:`Entry`) used by the instruction
templates (``instructions.py``) and by the image renderer (each type is drawn in its :attr:`Entry.rgb`, the
colour its visual descriptions speak of, so the visual_appearance subset can be grounded in the image).
Written for this project (EB's rewritten instructions are in this spirit, e.g. "something for serving soup"
for a Ladle, "two yellow bottles" for spray bottles); not taken from any dataset.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from embodied_rft.world.objects import TYPES

# type | names (first = plain) | common-sense descriptions | looks | colour word | r,g,b | preposition
_TABLE = """
AlarmClock|alarm clock,clock|something that wakes you up in the morning,a device that rings at a set time|small black clock with a round face,boxy black timepiece|black|40,40,48|
Apple|apple|a fruit that keeps the doctor away,a crunchy fruit often found in lunch boxes|round red fruit,shiny red fruit|red|200,30,40|
AppleSliced|apple slice,slice of apple,piece of apple|a piece of the fruit that keeps the doctor away,a bite-sized piece of crunchy fruit|thin red-edged wedge,pale wedge with a red rim|red|230,120,120|
ArmChair|armchair,arm chair|a comfy seat for one person,a padded chair with armrests|large brown padded seat,brown cushioned chair|brown|120,80,50|on
BaseballBat|baseball bat,bat|something used to hit a ball in a ballgame,sports gear swung at a pitched ball|long wooden club,tapered wooden stick|tan|190,150,90|
BasketBall|basketball,ball|a ball you bounce and shoot through a hoop,a ball for a game played on a court|orange ball with black lines,bumpy orange ball|orange|230,120,30|
Bathtub|bathtub,tub,bath|the place where you soak in warm water,where one takes a bath|long white tub,large white basin on the floor|white|235,235,240|in
Bed|bed|the place where you sleep at night,furniture you lie on to rest|large bed with a white cover,wide mattress with white sheets|white|225,225,235|on
Book|book|something you read for a story,a bound set of printed pages|thick blue hardcover,rectangular blue volume|blue|40,70,170|
Bowl|bowl|a dish for soup or cereal,a deep round dish|round white dish,deep white dish|white|240,240,230|in
Box|box,cardboard box|a container for packing things,something you store or ship items in|brown cardboard container,square brown carton|brown|160,120,70|in
Bread|bread,loaf of bread,loaf|a baked staple made from flour,something you toast for breakfast|brown loaf,golden-brown loaf|brown|200,150,80|
BreadSliced|bread slice,slice of bread,piece of bread|a piece of the baked staple you toast,a slice ready for a sandwich|flat golden-brown square,thin light-brown slice|brown|220,180,110|
ButterKnife|butter knife,knife|a blunt utensil for spreading butter,something for spreading jam on toast|short silver blade with a round tip,small dull silver blade|silver|190,190,200|
CD|cd,compact disc,disc|something that stores music or data,a disc you put in a player|shiny round silver disc,thin reflective disc|silver|200,200,215|
Cabinet|cabinet,cupboard|a place to store dishes and supplies,storage with a door|wooden cupboard with a door,tall wooden storage unit|wood|150,110,70|in
Candle|candle|something you light for a cozy glow,a wax stick with a wick|white wax stick,short white pillar of wax|white|245,240,220|
Cart|cart,trolley|a rolling stand for carrying supplies,a wheeled rack|metal rack on wheels,grey rolling stand|grey|150,150,150|on
CellPhone|cell phone,phone,cellphone|a device for calling and texting,something you use to call a friend|flat black handheld device,slim black rectangle with a screen|black|30,30,35|
Cloth|cloth,rag|something you wipe surfaces with,a piece of fabric for cleaning|soft purple fabric,folded purple rag|purple|140,70,160|
CoffeeMachine|coffee machine,coffee maker|the appliance that brews your morning drink,a machine that makes espresso|black appliance with a spout,tall black brewer|black|50,45,45|in
CoffeeTable|coffee table,low table|a low table in front of the sofa,a table for magazines and drinks by the couch|low wooden table,short rectangular table|wood|140,100,60|on
CounterTop|counter,countertop,kitchen counter|the work surface in a kitchen,where you chop vegetables|long grey stone surface,flat granite slab|grey|170,170,165|on
CreditCard|credit card,card|something you pay with at a store,a plastic card for buying things|small plastic rectangle,thin green card|green|40,150,90|
Cup|cup|something you drink water from,a small vessel for a drink|small white cup,short white vessel|white|230,230,220|in
Desk|desk|a table you work or study at,where you put your computer to work|wooden work table,wide brown desk|wood|130,90,55|on
DeskLamp|desk lamp,lamp|a small light for reading at a desk,a light you switch on to study|small lamp with a bent neck,short lamp with a shade|yellow|230,200,60|
DiningTable|dining table,table,kitchen table|the table where meals are eaten,where the family has dinner|large wooden table,big rectangular table|wood|160,115,70|on
DishSponge|sponge,dish sponge|something for scrubbing dishes,a soft pad for washing plates|yellow and green pad,small yellow scrubber|yellow|220,210,50|
Drawer|drawer|a sliding compartment for small items,a pull-out storage space|small wooden sliding box,wooden pull-out compartment|wood|145,105,65|in
Dresser|dresser,chest of drawers|furniture for storing clothes,where folded clothes are kept|wide wooden cabinet with drawers,low brown chest|wood|135,95,60|on
Egg|egg|something a hen lays,a breakfast food with a shell|small white oval,smooth white oval|white|245,240,225|
Faucet|faucet,tap|the fixture that gives running water,what you turn to get water|shiny silver spout,metal tap|silver|185,185,195|
FloorLamp|floor lamp,lamp,standing lamp|a tall light that stands in a corner,a lamp that lights up the room from the floor|tall lamp on a pole,standing lamp with a shade|yellow|235,210,90|
Fork|fork|a utensil with prongs for eating,something you eat spaghetti with|silver utensil with tines,pronged silver utensil|silver|195,195,205|
Fridge|fridge,refrigerator|the appliance that keeps food cold,where milk is kept cold|tall white appliance,big white cooler|white|225,230,235|in
GarbageCan|garbage can,trash can,bin|where you throw away rubbish,the place for waste|grey bin,round grey container|grey|120,120,120|in
Glassbottle|glass bottle,bottle|a glass container for drinks,a bottle made of glass|clear green bottle,transparent green bottle|green|80,170,110|
HandTowel|hand towel,towel|something you dry your hands with,a small towel by the sink|small white cloth,folded white towel|white|240,240,245|
Kettle|kettle,tea kettle|something you boil water in for tea,a pot with a spout for tea water|metal pot with a spout,round silver kettle|silver|175,175,185|
KeyChain|key chain,keychain,set of keys|something that holds your house keys,what you need to unlock the front door|small ring of metal keys,jingling silver keys|silver|200,190,150|
Knife|knife,kitchen knife|a sharp tool for cutting food,something for chopping vegetables|long sharp silver blade,steel blade with a black handle|silver|180,180,190|
Ladle|ladle|something for serving soup,a deep spoon with a long handle|long-handled scoop,big spoon with a deep bowl|silver|170,170,180|
Laptop|laptop,laptop computer|a portable computer,something you type emails on|thin grey folding computer,flat grey device with a keyboard|grey|110,110,120|
Lettuce|lettuce,head of lettuce|a leafy vegetable for salads,the green base of a salad|round green leafy head,ball of green leaves|green|90,180,70|
LettuceSliced|lettuce slice,slice of lettuce,piece of lettuce|a piece of the leafy salad vegetable,a shred of salad greens|small green leaf,thin green piece|green|140,210,110|
Microwave|microwave,microwave oven|the appliance that warms food quickly,where you reheat leftovers|black box with a glass door,small black oven|black|60,60,65|in
Mug|mug,coffee mug|a cup for hot coffee,something you drink tea from|cup with a handle,white cup with a handle|white|235,225,215|in
Newspaper|newspaper,paper|something with the daily news,printed pages with headlines|folded grey paper,stack of printed sheets|grey|200,200,190|
Ottoman|ottoman,footstool|a padded seat to rest your feet on,a cushioned footrest|round padded stool,low cushioned seat|brown|130,90,70|on
Pan|pan,frying pan|something for frying eggs,a flat pan for cooking on the stove|flat black pan with a handle,black skillet|black|45,45,50|in
Pen|pen|something you write with in ink,a tool for signing your name|thin blue stick,slim blue writing stick|blue|40,60,160|
Pencil|pencil|something you write with that can be erased,a wooden writing tool with lead|thin yellow stick,slim yellow wooden stick|yellow|235,190,40|
PepperShaker|pepper shaker,pepper|something that seasons food with pepper,a small container of ground pepper|small dark shaker,little black shaker|black|55,50,50|
Pillow|pillow|something soft to rest your head on,a cushion for the bed|soft white cushion,puffy white rectangle|white|240,235,240|
Plate|plate|a flat dish for serving food,what you eat dinner from|flat round white dish,round white platter|white|245,245,240|on
Plunger|plunger|a tool to unclog a toilet,something for fixing a blocked drain|rubber cup on a stick,red rubber suction cup|red|170,40,40|
Pot|pot,cooking pot|something for boiling pasta,a deep pan for making soup|deep metal pot,big silver pot|silver|160,160,170|in
Potato|potato|a starchy vegetable you can mash,what french fries are made from|lumpy brown tuber,small brown oval|brown|170,130,80|
PotatoSliced|potato slice,slice of potato,piece of potato|a piece of the vegetable fries come from,a slice of starchy vegetable|pale yellow disc,flat pale slice|yellow|230,210,150|
RemoteControl|remote control,remote|something that changes the tv channel,the clicker for the television|small black stick with buttons,black handheld with buttons|black|35,35,40|
Safe|safe|a locked box for valuables,where you keep money secure|heavy grey metal box,steel box with a dial|grey|100,100,105|in
SaltShaker|salt shaker,salt|something that seasons food with salt,a small container of salt|small white shaker,little clear shaker|white|235,235,235|
Shelf|shelf,shelves|a flat board for displaying things,where you line up books and decor|flat wooden board on the wall,open wooden rack|wood|155,115,75|on
SideTable|side table,nightstand,end table|a small table beside a bed or sofa,a little table next to the couch|small wooden table,short square table|wood|150,105,65|on
Sink|sink,sink basin,basin|where you wash dishes or hands,the basin under the tap|white basin,white washbasin|white|230,235,240|in
SoapBar|soap bar,bar of soap|something you wash your hands with,a solid bar for washing|small pink block,smooth pink bar|pink|235,150,180|
SoapBottle|soap bottle,bottle of soap|a bottle of liquid soap,a pump dispenser for washing hands|silver bottle with a brown pump,pump bottle|silver|190,185,180|
Sofa|sofa,couch|a long seat for the living room,where you sit to watch tv|long blue cushioned seat,big blue couch|blue|70,90,150|on
Spatula|spatula|a tool for flipping pancakes,a flat turner for the frying pan|flat black turner,black flipper with a long handle|black|50,50,55|
Spoon|spoon|a utensil for eating soup,something you stir coffee with|small silver scoop,shiny silver utensil|silver|200,200,210|
SprayBottle|spray bottle|a bottle that sprays cleaner,something for misting cleaning liquid|yellow bottle with a trigger,yellow squirt bottle|yellow|240,215,40|
Statue|statue,figurine|a decorative sculpture,an ornament shaped like a figure|small grey sculpture,stone-grey figure|grey|140,140,150|
StoveBurner|stove burner,burner,stove|the place on the stove where you cook,a hot ring for pots|black ring on the stove top,round black burner|black|40,40,40|on
TennisRacket|tennis racket,racket|something used to hit a tennis ball,sports gear with strings|oval frame with strings,red racket with a net|red|190,50,50|
TissueBox|tissue box,box of tissues|a box you pull tissues from when you sneeze,where you get a tissue for your nose|small blue cube,square blue box with a slot|blue|80,120,200|
Toilet|toilet|the bathroom fixture you flush,the porcelain seat in the bathroom|white porcelain bowl,white seat with a tank|white|245,245,250|on
ToiletPaper|toilet paper,roll of toilet paper,toilet roll|a roll you use in the bathroom,paper for the toilet|white paper roll,soft white roll|white|250,250,250|
ToiletPaperHanger|toilet paper holder,toilet paper hanger|the holder for the toilet roll,where the toilet roll hangs|metal bar on the wall,small silver holder|silver|180,180,185|on
Tomato|tomato|a red fruit used in salads and sauces,the main ingredient of ketchup|round red vegetable,soft round red fruit|red|215,40,30|
TomatoSliced|tomato slice,slice of tomato,piece of tomato|a piece of the fruit used in ketchup,a slice for a burger|thin red disc,round red slice|red|235,90,80|
Vase|vase|a container for flowers,something you put a bouquet in|tall blue jar,slim blue jar|blue|70,110,180|
Watch|watch,wristwatch|something you wear to tell the time,a timepiece for your wrist|small round face on a strap,black band with a dial|black|45,40,40|
WateringCan|watering can|something you water plants with,a can for the garden|green can with a long spout,green jug with a spout|green|60,150,70|
WineBottle|wine bottle,bottle of wine|a bottle of red wine,something you pour at a dinner party|dark green bottle,tall dark bottle|green|30,80,50|
"""


@dataclass(frozen=True, slots=True)
class Entry:
    type: str
    names: tuple[str, ...]
    common: tuple[str, ...]
    looks: tuple[str, ...]
    colour: str
    rgb: tuple[int, int, int]
    prep: str  # "in" or "on" for receptacles, "" otherwise


def _parse() -> dict[str, Entry]:
    out = {}
    for line in _TABLE.strip().splitlines():
        t, names, common, looks, colour, rgb, prep = line.split("|")
        out[t] = Entry(
            t,
            tuple(names.split(",")),
            tuple(common.split(",")),
            tuple(looks.split(",")),
            colour,
            tuple(int(x) for x in rgb.split(",")),
            prep,
        )  # type: ignore[arg-type]
    return out


LEX: dict[str, Entry] = _parse()
assert set(LEX) == set(TYPES), sorted(set(TYPES) ^ set(LEX))


def colour_of(typ: str) -> tuple[int, int, int]:
    e = LEX.get(typ)
    if e is not None:
        return e.rgb
    h = zlib.crc32(typ.encode())
    return (h & 0xFF, (h >> 8) & 0xFF, (h >> 16) & 0xFF)


__all__ = ["Entry", "LEX", "colour_of"]
